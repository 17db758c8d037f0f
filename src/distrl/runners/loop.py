"""The one training loop every algorithm and launcher shares.

Each pass: the runner's iteration -> the metrics row (one sum over ranks) -> evaluation (every
``eval.every`` updates, by eval workers or by the ranks themselves) and the stop check -> log ->
the ranks' agreement (preemption, checkpoint due: one small sum) -> checkpoint. The loop
also owns resume (counters, every rank's RNG and state), the bad-update stop and the progress
bar; it knows ranks only through the communicator and runners only through ``Runner``.
"""

from __future__ import annotations

import base64
import json
import math
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from distrl.algos.registry import algorithm
from distrl.config.run import describe_changes
from distrl.config.run_algorithm import evaluator, export, output_format, periodic_evaluator
from distrl.errors import UserError
from distrl.eval.policy import policy_from_saved
from distrl.io import checkpoint as ckpt
from distrl.io import train_state
from distrl.io.metrics import MetricsLogger, truncate_metrics
from distrl.io.profile import UpdateProfiler
from distrl.io.run_dir import record_config
from distrl.runners.base import COLLECTION_FIGURES, IterationResult, RunContext, Runner
from distrl.sharding import even_split
from distrl.usage import ProcessUsage

STOP_CHECK_SEED_OFFSET = 1_000_000
"""The early-stop check plays episodes from `eval.seed` + this: apart from `distrl eval`'s."""


class Preempted(Exception):
    """Training stopped on SIGTERM/SIGUSR1 after every rank agreed and a checkpoint was written."""

    def __init__(self, signal_name: str, global_step: int) -> None:
        super().__init__(f"preempted by {signal_name} at step {global_step}; checkpoint saved")
        self.global_step = global_step


@dataclass
class Agreement:
    """What every rank decides together after an update."""

    preempted: bool
    checkpoint_due: bool
    best_due: bool
    """This update's check scored the ranks' weights higher than any earlier (``checkpoint.keep_best``)."""


class PreemptionSignal(Protocol):
    """How the launch layer tells the loop a preemption signal came (``launch.preemption``): the
    loop installs it when training starts and reads it after every update."""

    signal_name: str | None

    @property
    def raised(self) -> bool: ...

    def install(self) -> None: ...

    def restore(self) -> None: ...


class TrainingLoop:
    def __init__(
        self,
        ctx: RunContext,
        runner: Runner,
        run_dir: Path,
        preemption: PreemptionSignal,
        checkpoint: ckpt.CheckpointFiles | None = None,
    ) -> None:
        """A fresh run, or one resumed from ``checkpoint`` (its files, the same on every rank)."""
        self.cfg = ctx.cfg
        self.comm = ctx.comm
        self.clock = ctx.clock
        self.runner = runner
        self.run_dir = run_dir
        self.launch_index = ctx.launch_index
        self.restart_count = ctx.restart_count
        self.counts_before: dict[str, float] = {}
        """Event counts (worker failures) of the run's earlier launches, from the checkpoint."""
        self.event_counts: dict[str, float] = {}
        """The run's event counts as of the last metrics row, saved in checkpoints."""
        self.global_step = 0
        self.update_index = 0
        self.stopped_by_check = False
        """The run ended on the evaluation check (``train.stop_return``), not the step budget."""
        self.launch_first_step = 0
        """The global step this launch started from (a resumed run's checkpoint step)."""
        self.planned_steps = self.cfg.train.total_steps
        """Where the run ends by its budget: ``train.total_steps`` rounded up to whole iterations
        where the runner's are fixed (``planned_steps``)."""
        self.bad_updates_in_a_row = 0
        self.preemption = preemption
        self.usage = ProcessUsage()
        """This rank's CPU share, memory and GPU memory, read once per update (``usage/rank<r>/*``)."""
        self.status = ctx.workers.status
        self.samples_collected = 0
        """This rank's env steps (logged rows) in this launch, for the launcher's live status."""
        self.eval_workers = ctx.workers.eval if ctx.comm.is_main else None
        """Rank 0's evaluation workers: the newest weights evaluated while training goes on."""
        self.evaluate_in_process: Callable[..., dict[str, list[float]]] | None = None
        """The algorithm's periodic evaluation, which the ranks run themselves in a job without
        eval workers (``Algorithm.periodic_eval``; set when ``run()`` starts)."""
        self.checkpoint_writer: ckpt.BackgroundWriter | None = None
        """Rank 0's checkpoint writer, open while ``run()`` runs."""
        keep_best = self.cfg.checkpoint.keep_best
        self.best_metric = algorithm(self.cfg.algo.name).best_metric if keep_best else None
        """The row's key whose highest value marks the best checkpoint; None: none is kept."""
        self._best: dict[str, Any] | None = None
        """Rank 0's record of the best checkpoint so far (``checkpoints/best.json``)."""
        self._best_candidate: dict[str, Any] | None = None
        """Rank 0's record of this update's score when it beats ``_best``: the next checkpoint,
        of this update's weights, is recorded as the best."""
        self._last_checkpoint = (0, time.monotonic())
        """(global step, monotonic time) of the last checkpoint."""
        self._last_row_time = 0.0
        """perf_counter() when the last metrics row was made: an update's whole pass runs from one
        row to the next (its ``time/update``)."""
        if checkpoint is not None:
            self._restore(checkpoint)

    def run(self) -> dict[str, Any]:
        """Train until ``total_steps`` (or ``stop_return``); return the last metrics row.

        Raises ``Preempted`` after saving a checkpoint when any rank got SIGTERM or SIGUSR1.
        """
        total_steps = self.cfg.train.total_steps
        self.planned_steps = planned_steps(total_steps, self.global_step, self.runner.steps_per_iteration)
        output = Path(self.cfg.output.path) if self.cfg.output.path else None
        logger = self._make_logger()
        if self.comm.is_main:
            record_config(self.run_dir, self.cfg)  # only now: a refused resume leaves the old one
            self.checkpoint_writer = ckpt.BackgroundWriter(
                self.run_dir / "checkpoints", self.cfg.checkpoint.keep_last
            )
            self._best = ckpt.best_checkpoint(self.run_dir / "checkpoints")  # an earlier launch's
        profile = self.run_dir / "profile" / f"rank{self.comm.rank}.json"
        profiler = UpdateProfiler(self.cfg.log.profile_updates, profile)
        row: dict[str, Any] = {}
        try:
            # Inside the try: whatever fails from here on (the runner's start included), the
            # handlers are put back and the runner, writer and logger closed.
            self.preemption.install()
            self.runner.start(fresh=self.global_step == 0)
            self.evaluate_in_process = self._in_process_evaluation()
            self.clock.take()  # start-up is no update's time
            start_time, self.launch_first_step = time.perf_counter(), self.global_step
            self._last_row_time = start_time
            self._last_checkpoint = (self.global_step, time.monotonic())
            # Collectives torch runs itself (FSDP's) fail in the same one line as distrl's own.
            with self.comm.peer_failures_named():
                while self.global_step < total_steps:
                    iteration_start = time.perf_counter()
                    sync_before = self.comm.grad_sync_time_s
                    result = self.runner.iteration(self.global_step)
                    profiler.step()
                    self.update_index += 1
                    self.global_step += result.env_steps
                    iteration_s = time.perf_counter() - iteration_start
                    row = self._metrics_row(
                        result,
                        sps=(self.global_step - self.launch_first_step) / (time.perf_counter() - start_time),
                        grad_sync_share=(self.comm.grad_sync_time_s - sync_before) / iteration_s,
                        time_s=time.perf_counter() - start_time,
                    )
                    with self.clock("eval"):
                        self._evaluate_periodically(row)
                        solved = self._reached_stop_return(row)
                        self._evaluate_asynchronously(row)
                    with self.clock("log"):
                        logger.log(row)
                        if result.trained is not None:
                            logger.log_ledger(
                                self.update_index, self.global_step, self._gathered(result.trained)
                            )
                    self._count_bad_updates(result.skipped)
                    agreed = self._agree(row)
                    if agreed.preempted:
                        self.save_checkpoint()
                        raise Preempted(
                            self.preemption.signal_name or "a signal on another rank", self.global_step
                        )
                    if solved:
                        self.stopped_by_check = True
                        break
                    # A skipped update changed nothing worth saving: keep the last good checkpoint newest.
                    healthy = not self.bad_updates_in_a_row
                    due = agreed.checkpoint_due or agreed.best_due
                    if due and healthy and self.global_step < total_steps:
                        with self.clock("checkpoint"):
                            self.save_checkpoint()
                self.save_checkpoint()
                if output is not None:
                    self._write_output(output)
        finally:
            self.preemption.restore()
            profiler.close()
            if self.checkpoint_writer is not None:
                self.checkpoint_writer.close()
            logger.close()
            self.runner.close()
        return row

    # ----------------------------------------------------------------------------- per update
    def _metrics_row(self, result: IterationResult, **timing: float) -> dict[str, Any]:
        """One row per update: the runner's numbers averaged (or, for episodes, summed) over all
        ranks in a single collective."""
        now = time.perf_counter()
        pass_s, self._last_row_time = now - self._last_row_time, now
        my_phases = self.clock.take()
        averaged = {**result.averaged, **{f"time/{k}": v for k, v in my_phases.items()}}
        averaged_keys, counted_keys = sorted(averaged), sorted(result.counted)
        episodes = result.episodes
        local = [*(averaged[k] for k in averaged_keys), *(result.counted[k] for k in counted_keys)]
        if episodes is not None:
            local += [episodes.return_sum, episodes.length_sum, episodes.count, episodes.finished]
        # Every rank's own collection speed and resource usage, in its own slots of the same sum.
        collect_s = sum(my_phases[phase] for phase in self.cfg.algo.collection_phases)
        usage = self.usage.read()
        self.samples_collected += result.local_steps
        if self.status is not None:
            mine = {**averaged, **result.counted}
            collection = {k: float(mine[k]) for k in COLLECTION_FIGURES if k in mine}
            self.status.publish(usage, self.samples_collected, {**collection, "time/update": pass_s})
        per_rank = len(usage) + 1
        mine = [result.local_steps / collect_s if collect_s > 0 else 0.0, *usage.values()]
        slots = [0.0] * (per_rank * self.comm.world_size)
        slots[per_rank * self.comm.rank : per_rank * (self.comm.rank + 1)] = mine
        total = self.comm.sum_scalars([*local, *slots])
        total, slots = total[: len(local)], total[len(local) :]
        speeds = slots[::per_rank]
        row: dict[str, Any] = {
            "global_step": self.global_step,
            "update": self.update_index,
            "ranks": self.comm.world_size,
        }
        sums, total = total[: len(averaged_keys)], total[len(averaged_keys) :]
        counts, total = total[: len(counted_keys)], total[len(counted_keys) :]
        row["launcher_restarts"] = self.restart_count
        row["resumes"] = self.launch_index
        row.update(self._count_with_earlier_launches(dict(zip(counted_keys, counts, strict=True))))
        if episodes is not None:
            return_sum, length_sum, count, finished = total
            row["episode_return_mean"] = return_sum / count if count else math.nan
            row["episode_length_mean"] = length_sum / count if count else math.nan
            # Finished episodes over the whole run: a resumed launch goes on from its checkpoint's.
            row["episodes"] = int(self._count_with_earlier_launches({"episodes": finished})["episodes"])
            row["recent_episodes"] = int(count)
        world_size = self.comm.world_size
        means = {k: v / world_size for k, v in zip(averaged_keys, sums, strict=True)}
        # Phases no rank used are left out; what no phase covers is "other".
        phases = {k: v for k, v in means.items() if k.startswith("time/") and v > 0}
        row.update({k: v for k, v in means.items() if not k.startswith("time/")})
        row.update(phases)
        row["time/other"] = pass_s - sum(phases.values())
        row["time/update"] = pass_s
        for rank in range(world_size):
            values = slots[per_rank * rank + 1 : per_rank * (rank + 1)]
            row.update({f"usage/rank{rank}/{key}": value for key, value in zip(usage, values, strict=True)})
        if world_size > 1 and min(speeds) > 0:
            row["rank_sps_min"], row["rank_sps_max"] = min(speeds), max(speeds)
            row["slowest_rank"] = speeds.index(min(speeds))
        row.update(result.replicated)
        row.update(timing)
        return row

    def _agree(self, row: dict[str, Any]) -> Agreement:
        """A preemption signal on any rank stops every rank; rank 0's clock alone decides
        time-based checkpoint intervals, and its record of the best score whether ``row``'s beats
        it; every rank follows it."""
        main = self.comm.is_main
        local = [
            float(self.preemption.raised),
            float(main and self._checkpoint_due()),
            float(main and self._beats_best(row)),
        ]
        preempted, checkpoint_due, best_due = self.comm.sum_scalars(local)
        return Agreement(preempted=preempted > 0, checkpoint_due=checkpoint_due > 0, best_due=best_due > 0)

    def _beats_best(self, row: dict[str, Any]) -> bool:
        """Whether ``row`` scores the ranks' weights (``best_metric``) higher than every earlier
        check of the run; if so its record waits in ``_best_candidate`` for the checkpoint (an
        earlier update's, never saved, is dropped: those weights are gone)."""
        self._best_candidate = None
        value = row.get(self.best_metric) if self.best_metric is not None else None
        if value is None or not math.isfinite(value):
            return False
        if self._best is not None and value <= self._best["value"]:
            return False
        self._best_candidate = {"metric": self.best_metric, "value": value, "global_step": self.global_step}
        return True

    def _count_bad_updates(self, skipped: bool) -> None:
        """Stop once ``train.max_bad_updates`` updates in a row had non-finite numbers."""
        self.bad_updates_in_a_row = self.bad_updates_in_a_row + 1 if skipped else 0
        limit = self.cfg.train.max_bad_updates
        if self.bad_updates_in_a_row >= limit:
            raise UserError(
                f"training stopped at step {self.global_step}: {limit} updates in a row had a non-finite "
                f"loss, gradient or observation and were skipped (set train.max_bad_updates to allow "
                f"more); the last good checkpoint in {self.run_dir / 'checkpoints'} is kept",
                code="train-bad-updates-exhausted",
            )

    def _checkpoint_due(self) -> bool:
        step, when = self._last_checkpoint
        minutes = self.cfg.checkpoint.interval_minutes
        return self.global_step - step >= self.cfg.checkpoint.interval_steps or (
            minutes is not None and time.monotonic() - when >= 60 * minutes
        )

    # ----------------------------------------------------------------------------- stop check
    def _reached_stop_return(self, row: dict[str, Any]) -> bool:
        """Evaluate the (identical) policy deterministically, the episodes split over the ranks,
        and stop every rank on the mean over all of them. A check that reaches the target is
        confirmed on ``stop_confirm_episodes`` more episodes before training stops."""
        target = self.cfg.train.stop_return
        if target is None or self.update_index % self.cfg.train.stop_check_every:
            return False
        # Seeds kept apart from eval.seed's so the final `distrl eval` is not the stop test.
        seed = self.cfg.eval.seed + STOP_CHECK_SEED_OFFSET
        episodes = self.cfg.eval.episodes
        total = self._evaluate_split(self._returns, episodes, seed)["return"]
        row["stop_check_return"] = total / episodes
        confirm = self.cfg.train.stop_confirm_episodes
        if row["stop_check_return"] >= target and confirm:
            total += self._evaluate_split(self._returns, confirm, seed + episodes)["return"]
            row["stop_check_return"] = total / (episodes + confirm)
        return row["stop_check_return"] >= target

    def _in_process_evaluation(self) -> Callable[..., dict[str, list[float]]] | None:
        """The algorithm's periodic evaluation when the ranks run it themselves: the job has no
        eval workers (only rank 0 is given them: one sum tells every rank)."""
        evaluate = periodic_evaluator(self.cfg)
        if evaluate is None or self.comm.sum_scalars([float(self.eval_workers is not None)])[0]:
            return None
        return evaluate

    def _evaluate_periodically(self, row: dict[str, Any]) -> None:
        """Every ``eval.every`` updates of a job without eval workers, the ranks evaluate the
        policy as its algorithm declares (``Algorithm.periodic_eval``: GRPO's held-out prompts),
        ``eval.episodes`` split over them, and log each metric's mean over all of them."""
        if self.evaluate_in_process is None or self.update_index % self.cfg.eval.every:
            return
        episodes = self.cfg.eval.episodes
        totals = self._evaluate_split(self.evaluate_in_process, episodes, self.cfg.eval.seed)
        row.update({metric: total / episodes for metric, total in totals.items()})

    def _evaluate_asynchronously(self, row: dict[str, Any]) -> None:
        """Rank 0 hands every ``eval.every``-th update's weights to its eval workers and logs
        what they finished since the last update; it never waits for them."""
        if self.eval_workers is None:
            return
        if self.update_index % self.cfg.eval.every == 0:
            meta = {"config": self.cfg.model_dump(mode="json"), "global_step": self.global_step}
            snapshot = train_state.snapshot(self.runner.train_state(), meta)
            self.eval_workers.submit(snapshot, self.cfg.eval.episodes, self.cfg.eval.seed)
        row.update(self.eval_workers.results())
        row.update(self._count_with_earlier_launches(self.eval_workers.counts()))

    def _gathered(self, trained: list[int]) -> list[int]:
        """Every rank's ``trained``, in rank order, on rank 0 (one gather of a few bytes)."""
        parts = self.comm.all_gather_bytes(json.dumps(trained).encode())
        return [index for part in parts for index in json.loads(part)]

    def _count_with_earlier_launches(self, counts: dict[str, float]) -> dict[str, float]:
        """Event counts of this launch (over all ranks) plus the run's earlier launches' (as of the
        checkpoint resumed from); remembered for the next checkpoint."""
        totals = {key: count + self.counts_before.get(key, 0.0) for key, count in counts.items()}
        self.event_counts.update(totals)
        return totals

    def _evaluate_split(
        self, evaluate: Callable[..., dict[str, list[float]]], episodes: int, seed: int
    ) -> dict[str, float]:
        """Each metric of ``evaluate`` (a value per episode) summed over ``episodes`` deterministic
        episodes (episode i seeded ``seed + i``), each rank running its share; every rank gets the
        same sums."""
        first, count = even_split(episodes, self.comm.rank, self.comm.world_size)
        with self.runner.whole_weights():
            values = evaluate(self.cfg, self.runner.deployable_policy(), count, seed + first)
        return dict(zip(values, self.comm.sum_scalars([sum(v) for v in values.values()]), strict=True))

    def _returns(self, *args: Any) -> dict[str, list[float]]:
        """The returns of the algorithm's evaluator (``Algorithm.evaluator``), as ``return``."""
        return {"return": evaluator(self.cfg)(*args)}

    def _make_logger(self) -> MetricsLogger:
        main = self.comm.is_main
        if main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            truncate_metrics(self.run_dir, self.global_step)
        return MetricsLogger(
            self.run_dir,
            enabled=main,
            tensorboard=self.cfg.log.tensorboard,
            total_steps=self.planned_steps,
            progress=self.cfg.log.progress,
        )

    # ----------------------------------------------------------------------------- checkpoints
    def save_checkpoint(self) -> None:
        """Collective: every rank contributes its RNG state, parameter digest and own state;
        rank 0 checks the digests agree and writes, recording it as the best so far when this
        update's score beat every earlier one (``_best_candidate``)."""
        state = self.runner.train_state()
        mine = {
            "torch_rng": base64.b64encode(torch.get_rng_state().numpy().tobytes()).decode(),
            "param_sha256": train_state.parameter_digest(state),
            "runner": self.runner.rank_state(),
        }
        ranks = [json.loads(b) for b in self.comm.all_gather_bytes(json.dumps(mine).encode())]
        digests = {r["param_sha256"] for r in ranks}
        if len(digests) != 1:
            raise RuntimeError(f"ranks hold different parameters at step {self.global_step}: {digests}")
        shards = None
        if self.runner.sharded:  # every rank writes its own shards first
            shards = ckpt.shards_dir(self.run_dir / "checkpoints", self.global_step)
            if self.comm.is_main:
                shutil.rmtree(shards, ignore_errors=True)  # a crashed launch's
            self.comm.barrier()
            train_state.write_shards(state, shards)
        if self.checkpoint_writer is not None:
            meta = {
                "global_step": self.global_step,
                "update_index": self.update_index,
                "launch_index": self.launch_index,
                "event_counts": self.event_counts,
                "world_size": self.comm.world_size,
                "config": self.cfg.model_dump(mode="json"),
                "ranks": ranks,
            }
            record, self._best_candidate = self._best_candidate, None
            files = train_state.state_files(state, meta)
            self.checkpoint_writer.submit(self.global_step, files, shards, best=record)
            if record is not None:
                self._best = record
        self._last_checkpoint = (self.global_step, time.monotonic())

    def _write_output(self, out: Path) -> None:
        """The final policy written for deployment by rank 0 as its algorithm exports it (ReAgent's
        node 0 saving the model); a sharded learner's rebuilt from its weights gathered whole
        (every rank takes part)."""
        state = self.runner.train_state()
        if self.runner.sharded:
            whole = train_state.snapshot(state, {"config": self.cfg.model_dump(mode="json")})
            policy = policy_from_saved(whole, "the trained policy")[1]
        else:
            policy = self.runner.deployable_policy()
        if self.comm.is_main:
            fmt = output_format(self.cfg, out)
            export(self.cfg, policy, state.observation_space, fmt, out, "output.path")

    def _other_ranks_line(self, saved_ranks: int) -> str:
        """The one line of a run going on with another number of ranks than its checkpoint's
        (a node lost under torchrun's ``--nnodes=MIN:MAX``, or a launch of another size)."""
        sizes = "global sizes kept: the same global batch and optimiser steps, shared out anew"
        if self.cfg.env.num_envs_per_rank is not None:
            sizes = "env.num_envs_per_rank: the global batch follows the ranks"
        return (
            f"distrl: going on with {self.comm.world_size} rank(s) from a checkpoint of {saved_ranks} "
            f"(ranks lost or added since): {sizes}"
        )

    def _restore(self, files: ckpt.CheckpointFiles) -> None:
        """Load a checkpoint on every rank (the files came from rank 0, read from the run dir's
        checkpoint of their step); rank r takes rank r's RNG and own state when the saving launch
        had such a rank."""
        step = json.loads(files["state.json"])["global_step"]
        where = self.run_dir / "checkpoints" / ckpt.checkpoint_dir_name(step)
        meta = train_state.read_meta(files, where)
        state = self.runner.train_state()
        saved = train_state.saved_model(files, where)
        difference = train_state.first_difference(saved, state.model_tensors())
        if difference is not None:
            changes = describe_changes(meta["config"], self.cfg, str(where))
            raise UserError(
                f"checkpoint {where} {difference} ({changes}); resuming needs the same network "
                "(use a new --run-dir to start over)",
                code="resume-network-mismatch",
            )
        train_state.restore(state, files, where)
        ranks = meta["ranks"]
        if self.comm.is_main:
            print(f"distrl: resuming from {where}", file=sys.stderr)
            if len(ranks) != self.comm.world_size:
                print(self._other_ranks_line(len(ranks)), file=sys.stderr)
        self.global_step = meta["global_step"]
        self.update_index = meta["update_index"]
        self.counts_before = meta.get("event_counts", {})
        self.event_counts = dict(self.counts_before)
        if self.comm.rank < len(ranks):
            mine = ranks[self.comm.rank]
            rng = base64.b64decode(mine["torch_rng"])
            torch.set_rng_state(torch.frombuffer(bytearray(rng), dtype=torch.uint8))
            self.runner.load_rank_state(mine.get("runner", {}))


def planned_steps(budget: int, done: int, per_iteration: int | None) -> int:
    """The step a run that has done ``done`` steps ends at by its ``budget``: the budget rounded
    up to whole iterations of ``per_iteration`` steps (None: they vary; the budget)."""
    if per_iteration is None or done >= budget:
        return budget
    return done + math.ceil((budget - done) / per_iteration) * per_iteration
