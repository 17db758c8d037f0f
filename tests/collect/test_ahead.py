"""What a transport cannot do when collecting ahead is one table (``collect.ahead.REFUSALS``):
each of its rows refused in one line where the transport is known, before anything starts."""

from __future__ import annotations

import pytest

from distrl.collect.ahead import REFUSALS, Refusal, Schedule
from distrl.config.run import load_config
from distrl.ray.driver import check_workers
from tests.helpers import CARTPOLE, GRPO_REVERSE

ASKING = {
    "ray-collect-queue-drop-oldest": (
        CARTPOLE,
        ["workers.env=1", "collect.lag=1", "collect.weights=newest", "collect.queue_full=drop_oldest"],
    ),
    "ray-generation-weights-newest": (
        GRPO_REVERSE, ["workers.generation=1", "collect.lag=1", "collect.weights=newest"],
    ),
}  # fmt: skip
"""A run that asks each row's transport for what the row refuses."""


@pytest.mark.parametrize("refusal", REFUSALS, ids=[row.error.code for row in REFUSALS])
def test_each_row_of_the_refusal_table_is_one_line(refusal: Refusal) -> None:
    config, overrides = ASKING[refusal.error.code]
    with pytest.raises(type(refusal.error)) as raised:
        check_workers(load_config(config, overrides))
    assert raised.value.code == refusal.error.code and "\n" not in str(raised.value)
    assert str(raised.value).startswith(f"collect.{refusal.key}={refusal.value} with {refusal.transport}: ")
    # The same run without what the row refuses is accepted.
    allowed = [o for o in overrides if not o.startswith(f"collect.{refusal.key}=") and "queue_full" not in o]
    check_workers(load_config(config, allowed))


def test_every_row_has_a_run_that_asks_for_it() -> None:
    assert sorted(ASKING) == sorted(row.error.code for row in REFUSALS)


def test_the_schedule_drops_only_what_is_older_than_max_age() -> None:
    assert not Schedule(lag=1).too_old(9, 0)  # no max_age: nothing is dropped
    bounded = Schedule(lag=0, newest=True, max_age=1)
    assert [bounded.too_old(5, version) for version in (5, 4, 3)] == [False, False, True]
    assert [Schedule(lag, newest).requested_ahead for lag, newest in ((0, False), (2, False), (0, True))] == [
        0, 2, 1,
    ]  # fmt: skip
