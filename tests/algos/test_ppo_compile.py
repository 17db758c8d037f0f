"""``train.compile``: PPO's loss through ``torch.compile`` takes the eager update's steps."""

from __future__ import annotations

import copy

import pytest
import torch

from distrl.algos.ppo import PPO
from tests.algos.test_ppo_distributed import CFG, MINIBATCHES, TOTAL, flat_params, full_batch, make_policy


@pytest.mark.parametrize("kind", ["categorical", "gaussian"])
@pytest.mark.slow
def test_compiled_update_matches_the_eager_update(kind: str) -> None:
    eager_policy = make_policy(kind)
    compiled_policy = copy.deepcopy(eager_policy)
    batch = full_batch(eager_policy)
    before = flat_params(eager_policy)
    # Unequal minibatches (40, 31, 25 rows): a new size must not change the arithmetic.
    sizes = [40, 31, TOTAL - 71]

    def sampler(n: int) -> list[torch.Tensor]:
        return list(torch.arange(n).split(sizes))

    eager = PPO(eager_policy, CFG, MINIBATCHES).update(batch, sampler)
    torch._dynamo.utils.counters.clear()
    compiled = PPO(compiled_policy, CFG, MINIBATCHES, compile_loss=True).update(batch, sampler)
    assert not torch._dynamo.utils.counters["graph_break"]  # the loss is one graph

    assert abs(flat_params(eager_policy) - before).max() > 1e-3  # the update moved the weights
    assert abs(flat_params(compiled_policy) - flat_params(eager_policy)).max() < 1e-5
    assert compiled.keys() == eager.keys()
    for key, value in eager.items():
        assert compiled[key] == pytest.approx(value, rel=1e-4, abs=1e-6), key
