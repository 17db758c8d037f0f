"""GRPO's runner: every rank (the seed's policy workers) generates completions for its share of
the step's prompts with its own, identical weights, scores them with the task's reward functions,
and takes the clipped-surrogate steps; gradients are averaged across ranks weighted by the loss's
own normaliser, so after each update all ranks hold identical parameters.

``iteration()`` reads as the algorithm: prompts -> generate (with the sampling policy's
log-probabilities) -> score -> group advantages -> log-probabilities of the reference policy
(with a KL penalty) and, in low precision, of the policy again -> update; the shared loop logs,
scores held-out prompts (``Algorithm.periodic_eval``), checks stop rules and checkpoints around
it. Everything random is keyed on the step and the prompt's global index (prompts, sampling
noise, minibatches), so 1 and N ranks train alike and a resumed run continues as an unbroken one
would.
"""

from __future__ import annotations

import functools
import time
from contextlib import nullcontext

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from distrl.algos.grpo import GRPO, entropy_coefficient, group_advantages
from distrl.collect.completions import CompletionSource, LocalGeneration
from distrl.errors import UserError
from distrl.io.train_state import ModuleTrainState, TrainState
from distrl.models.sequence_policy import SequencePolicy, sequence_model, sequence_tokenizer
from distrl.precision import low_precision
from distrl.runners.base import EpisodeStats, IterationResult, RunContext, Runner, scheduled_learning_rate
from distrl.runners.learner import set_up_learner
from distrl.seeding import minibatch_seed, seed_torch
from distrl.sharding import even_split
from distrl.storage.completions import CompletionBatch
from distrl.tasks.prompts import Example, Prompts, PromptSource
from distrl.tasks.verifiers import RewardFunctions, Scorer


class GRPORunner(Runner):
    algorithm = "grpo"

    def __init__(self, ctx: RunContext) -> None:
        cfg, comm, device = ctx.cfg, ctx.comm, ctx.device
        self.cfg, self.comm, self.clock, self.device = cfg, comm, ctx.clock, device
        seed_torch(cfg.train.seed, comm.rank)
        prompts = cfg.algo.num_prompts_per_step
        if prompts < comm.world_size:
            raise UserError(
                f"algo.num_prompts_per_step={prompts} counts prompts over all ranks and is fewer than the "
                f"{comm.world_size} ranks; give every rank at least one",
                code="sharding-prompts-fewer-than-ranks",
            )
        self.drawn_prompts = cfg.algo.drawn_prompts
        """Prompts generated for per update over all ranks (more than are trained on with
        ``algo.dynamic_sampling``)."""
        self.first_prompt, self.prompt_count = even_split(self.drawn_prompts, comm.rank, comm.world_size)
        self.group_size = cfg.algo.num_generations_per_prompt
        self.completions_per_step = self.drawn_prompts * self.group_size
        self.tokenizer = sequence_tokenizer(cfg)
        # In Ray mode prompt workers serve the prompts and verifier workers score the completions
        # (ray.prompt_workers.RayPromptWorkers, ray.verifier_workers.RayVerifierWorkers).
        prompt_workers = ctx.workers.group("prompt")
        verifiers = ctx.workers.group("verifier")
        self.prompts: Prompts = (
            prompt_workers.start(cfg.task, cfg.train.seed)
            if prompt_workers is not None
            else PromptSource(cfg.task, cfg.train.seed, held_out_side=False)
        )
        self.reward_functions: Scorer = (
            verifiers.start(cfg.task) if verifiers is not None else RewardFunctions(cfg.task)
        )
        self.remote = [group for group in (prompt_workers, verifiers) if group is not None]
        self.policy = sequence_model(cfg, self.tokenizer).to(device)
        self.policy.activation_checkpointing = cfg.train.activation_checkpointing
        self.autocast = low_precision(cfg.train.mixed_precision, device, heavy_model=True)
        # Sharded: gathered in the autocast dtype (the reference policy with it), reduced in float32.
        self.networks = set_up_learner(
            comm, cfg.train.sharding, [self.policy], [self.policy] if cfg.algo.kl_coef > 0 else [],
            copies_act=True, param_dtype=self.autocast, offload=cfg.train.optimizer_offload,
        )  # fmt: skip
        self.algo = GRPO(
            self.policy,
            cfg.algo,
            self.tokenizer.pad_id,
            gradient_sync=functools.partial(comm.sum_gradients_, clock=ctx.clock),
            clock=ctx.clock,
            autocast=self.autocast,
            accumulation_steps=cfg.train.gradient_accumulation_steps,
            optimizer_offload=cfg.train.optimizer_offload,
            hold_unsharded_gradients=cfg.train.hold_unsharded_gradients,
            reference=next(iter(self.networks.copies), None),
        )
        # In Ray mode generation workers may generate the completions, collect.lag steps ahead.
        generation_workers = ctx.workers.group("generation")  # ray.generation_workers.RayGenerationWorkers
        self.generation: CompletionSource
        if generation_workers is None:
            lockstep = self.sharded and cfg.algo.generation_weights == "sharded"
            self.generation = LocalGeneration(
                cfg, self.policy, self.tokenizer, self.step_prompts, device, self.autocast, ctx.clock,
                any_running=(lambda running: comm.sum_scalars([running])[0] > 0) if lockstep else None,
            )  # fmt: skip
        else:
            self.generation = generation_workers.start(cfg).acting(
                self.policy, self.step_prompts, self.tokenizer.pad_id, device, ctx.clock
            )
            self.remote.append(generation_workers)
        self.measure_generation = generation_workers is not None and cfg.collect.lag > 0
        """Generation runs ahead: the learner takes its own log-probabilities of every batch, to
        correct for the lag and to report how far generation's are from them."""
        self.policy_version = 0
        """Updates in this launch: the version of the weights the next step is generated with."""
        self.finished = 0

    def start(self, fresh: bool) -> None:
        pass

    def iteration(self, global_step: int) -> IterationResult:
        cfg = self.cfg
        step = global_step // self.completions_per_step
        lr = scheduled_learning_rate(cfg, global_step)
        self.algo.set_learning_rate(lr)
        # Every pass before the update runs on weights gathered once (a sharded learner's), so
        # ranks may run as many as their completions need; or, generating on the shards, on
        # weights gathered a layer at a time, every rank running the same passes.
        gathered_once = self.cfg.algo.generation_weights == "gathered"
        with self.whole_weights() if gathered_once else nullcontext():
            start = time.perf_counter()
            generated = self.generation.completions(step, self.policy_version)
            generate_s = time.perf_counter() - start
            done, examples = generated.completions, generated.examples
            age = self.policy_version - generated.policy_version
            with self.clock("score"):
                texts = [self.tokenizer.decode(row) for row in done.tokens.tolist()]
                grouped = [example for example in examples for _ in range(self.group_size)]
                scores = self.reward_functions.score(grouped, texts, done.ended.tolist())
            rewards = torch.tensor(scores.rewards, dtype=torch.float64).view(-1, self.group_size)
            advantages = group_advantages(rewards, cfg.algo.baseline, cfg.algo.scale_by_std)
            # The policy's own dtype, not the bf16 a sharded policy is gathered in.
            dtype = torch.promote_types(next(self.policy.parameters()).dtype, torch.float32)
            # The ratios compare with the generating policy's log-probabilities, kept as it sampled
            # in full precision (taken again below in low precision).
            batch = CompletionBatch(
                *done.sequences(), done.mask, advantages.view(-1).to(self.device, dtype), done.log_probs
            )
            entropy = done.entropy
            kept = self.kept_prompts(advantages)
            if cfg.algo.dynamic_sampling:
                rows = self.local_rows(self.local_positions(kept)).to(self.device)
                batch, entropy = batch.rows(rows), None if entropy is None else entropy[rows]
            entropy, generation = self.algo.prepare(batch, entropy, self.measure_generation, age)
        self.algo.entropy_coef = entropy_coefficient(cfg.algo, self.global_entropy(entropy, batch))
        start = time.perf_counter()
        losses = self.algo.update(batch, self.minibatch_plan(step, kept))
        update_s = time.perf_counter() - start
        self.policy_version += 1
        skipped = losses.pop("skipped_minibatches")
        lengths = done.mask.sum(1).double()
        self.finished += len(texts)
        averaged = {
            **losses,
            "unfinished_fraction": scores.unfinished / len(texts),
            "zero_advantage_groups": float((advantages == 0).all(1).double().mean()),
            "generated_tokens_per_s": float(lengths.sum()) / generate_s,
            "trained_tokens_per_s": float(lengths.sum()) * cfg.algo.update_epochs / update_s,
            **{f"reward/{name}": float(np.mean(v)) if v else 0.0 for name, v in scores.by_function.items()},
            "sample_age": float(age),
            **generation,
        }
        return IterationResult(
            env_steps=self.completions_per_step,
            averaged=averaged,
            replicated={
                "learning_rate": lr,
                "skipped_minibatches": skipped,
                "entropy_coef": self.algo.entropy_coef,
                "trained_prompts": float(len(kept)),
            },
            counted={key: value for group in self.remote for key, value in group.counts().items()},
            episodes=EpisodeStats(float(rewards.sum()), float(lengths.sum()), len(texts), self.finished),
            local_steps=len(texts),
            skipped=skipped > 0,
            trained=generated.indices,
        )

    def step_prompts(self, step: int) -> tuple[list[int], list[Example]]:
        """This rank's prompts of ``step``: their global indices and examples (the curriculum as
        of the step)."""
        first = step * self.drawn_prompts + self.first_prompt
        indices = list(range(first, first + self.prompt_count))
        progress = step * self.completions_per_step / self.cfg.train.total_steps
        return indices, self.prompts.examples(indices, progress)

    def global_entropy(self, entropy: torch.Tensor | None, batch: CompletionBatch) -> float:
        """The sampling policy's mean token entropy over every rank's completions (``entropy``
        None: this rank trains on none): one collective, only with ``algo.entropy_target`` (its
        one reader); 0 without it."""
        if self.cfg.algo.entropy_target is None:
            return 0.0
        local = [0.0, 0.0]
        if entropy is not None:
            mask = batch.completion_mask.to(entropy.dtype)
            local = [float((entropy * mask).sum()), float(mask.sum())]
        total, tokens = self.comm.sum_scalars(local)
        return total / max(tokens, 1.0)

    def kept_prompts(self, advantages: torch.Tensor) -> torch.Tensor:
        """The step's prompts to train on, as positions among all drawn (ascending, the same on
        every rank): all of them, or with ``algo.dynamic_sampling`` the first
        ``num_prompts_per_step`` whose group's advantages are not all zero, decided on every rank's
        flags summed, so that it depends on global positions and rewards only, not on the ranks."""
        algo = self.cfg.algo
        if not algo.dynamic_sampling:
            return torch.arange(self.drawn_prompts)
        flags = [0.0] * self.drawn_prompts
        informative = (advantages != 0).any(1).tolist()
        flags[self.first_prompt : self.first_prompt + self.prompt_count] = [float(f) for f in informative]
        summed = torch.tensor(self.comm.sum_scalars(flags))
        return summed.nonzero().view(-1)[: algo.num_prompts_per_step]

    def local_positions(self, prompts: torch.Tensor) -> torch.Tensor:
        """This rank's prompts among ``prompts`` (global positions, ascending), as positions among
        the prompts it drew."""
        mine = (prompts >= self.first_prompt) & (prompts < self.first_prompt + self.prompt_count)
        return prompts[mine] - self.first_prompt

    def local_rows(self, prompts: torch.Tensor) -> torch.Tensor:
        """The completion rows of ``prompts`` (positions), group after group."""
        return (prompts[:, None] * self.group_size + torch.arange(self.group_size)).reshape(-1)

    def minibatch_plan(self, step: int, kept: torch.Tensor) -> list[list[torch.Tensor]]:
        """Per epoch, this rank's rows of each global minibatch: the ``kept`` prompts shuffled by
        a generator keyed on the step and epoch (the same on every rank) and cut into
        ``num_minibatches`` parts of whole groups (fewer if fewer prompts are kept); a rank takes
        its own prompts' completions, as rows of its batch, which holds its kept prompts in order."""
        algo = self.cfg.algo
        mine = self.local_positions(kept)
        plan: list[list[torch.Tensor]] = []
        for epoch in range(algo.update_epochs if len(kept) else 0):
            generator = torch.Generator().manual_seed(minibatch_seed(self.cfg.train.seed, step, epoch))
            order = kept[torch.randperm(len(kept), generator=generator)]
            epoch_plan = []
            for part in order.tensor_split(min(algo.num_minibatches, len(kept))):
                local = self.local_positions(part.sort().values)
                epoch_plan.append(self.local_rows(torch.searchsorted(mine, local)).to(self.device))
            plan.append(epoch_plan)
        return plan

    def train_state(self) -> TrainState:
        vocab, context = self.tokenizer.vocab_size, self.cfg.model.transformer.context
        modules: dict[str, nn.Module] = {"policy": self.policy}
        if self.algo.reference is not None:
            modules["reference"] = self.algo.reference
        return ModuleTrainState(
            self.algorithm,
            gym.spaces.MultiDiscrete([vocab] * context),
            gym.spaces.Discrete(vocab),
            modules,
            {"policy": self.algo.optimizer},
        )

    def deployable_policy(self) -> nn.Module:
        return SequencePolicy(self.policy, self.tokenizer, self.cfg.algo.max_new_tokens)

    def close(self) -> None:
        pass
