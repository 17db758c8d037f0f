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

import copy
import functools
import time
from typing import TYPE_CHECKING

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from distrl.algos.grpo import GRPO, entropy_coefficient, group_advantages
from distrl.errors import UserError
from distrl.io.train_state import ModuleTrainState, TrainState
from distrl.models.generate import Completions, Sampling, generate, left_padded
from distrl.models.sequence_policy import SequencePolicy, sequence_model, sequence_tokenizer
from distrl.precision import autocast, low_precision
from distrl.runners.base import EpisodeStats, IterationResult, RunContext, Runner, scheduled_learning_rate
from distrl.seeding import completion_seed, minibatch_seed, seed_torch
from distrl.sharding import even_split
from distrl.storage.completions import CompletionBatch
from distrl.tasks.prompts import Example, PromptSource
from distrl.tasks.verifiers import RewardFunctions

if TYPE_CHECKING:
    from distrl.ray.prompt_workers import RayPromptWorkers
    from distrl.ray.verifier_workers import RayVerifierWorkers


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
                f"{comm.world_size} ranks; give every rank at least one"
            )
        self.drawn_prompts = cfg.algo.drawn_prompts
        """Prompts generated for per update over all ranks (more than are trained on with
        ``algo.dynamic_sampling``)."""
        self.first_prompt, self.prompt_count = even_split(self.drawn_prompts, comm.rank, comm.world_size)
        self.group_size = cfg.algo.num_generations_per_prompt
        self.completions_per_step = self.drawn_prompts * self.group_size
        self.tokenizer = sequence_tokenizer(cfg)
        # In Ray mode prompt workers serve the prompts and verifier workers score the completions.
        prompt_workers: RayPromptWorkers | None = ctx.workers.group("prompt")
        verifiers: RayVerifierWorkers | None = ctx.workers.group("verifier")
        self.prompts: PromptSource | RayPromptWorkers = (
            prompt_workers.start(cfg.task, cfg.train.seed)
            if prompt_workers is not None
            else PromptSource(cfg.task, cfg.train.seed, held_out_side=False)
        )
        self.reward_functions: RewardFunctions | RayVerifierWorkers = (
            verifiers.start(cfg.task) if verifiers is not None else RewardFunctions(cfg.task)
        )
        self.remote = [group for group in (prompt_workers, verifiers) if group is not None]
        self.policy = sequence_model(cfg, self.tokenizer).to(device)
        self.policy.activation_checkpointing = cfg.train.activation_checkpointing
        comm.broadcast_parameters_(self.policy)
        self.reference = copy.deepcopy(self.policy).requires_grad_(False) if cfg.algo.kl_coef > 0 else None
        """The frozen initial policy the KL penalty keeps close to."""
        self.autocast = low_precision(cfg.train.mixed_precision, device, heavy_model=True)
        self.algo = GRPO(
            self.policy,
            cfg.algo,
            self.tokenizer.pad_id,
            gradient_sync=functools.partial(comm.sum_gradients_, clock=ctx.clock),
            clock=ctx.clock,
            autocast=self.autocast,
            accumulation_steps=cfg.train.gradient_accumulation_steps,
            optimizer_offload=cfg.train.optimizer_offload,
        )
        self.sampling = Sampling(cfg.algo.temperature, cfg.algo.top_k, cfg.algo.top_p)
        self.finished = 0

    def start(self, fresh: bool) -> None:
        pass

    def iteration(self, global_step: int) -> IterationResult:
        cfg = self.cfg
        step = global_step // self.completions_per_step
        lr = scheduled_learning_rate(cfg, global_step)
        self.algo.set_learning_rate(lr)
        first = step * self.drawn_prompts + self.first_prompt
        indices = list(range(first, first + self.prompt_count))
        examples = self.prompts.examples(indices, global_step / cfg.train.total_steps)
        start = time.perf_counter()
        done = self.generate(step, indices, examples)
        generate_s = time.perf_counter() - start
        with self.clock("score"):
            texts = [self.tokenizer.decode(row) for row in done.tokens.tolist()]
            grouped = [example for example in examples for _ in range(self.group_size)]
            scores = self.reward_functions.score(grouped, texts, done.ended.tolist())
        rewards = torch.tensor(scores.rewards, dtype=torch.float64).view(-1, self.group_size)
        advantages = group_advantages(rewards, cfg.algo.baseline, cfg.algo.scale_by_std)
        dtype = next(self.policy.parameters()).dtype
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
        if len(batch) and batch.old_log_probs is None:
            # In low precision, generation's one-token steps and the loss's passes round apart:
            # the ratios compare with log-probabilities from a pass like the loss's own.
            with self.clock("log_probs"):
                batch.old_log_probs, entropy = self.algo.log_probs_and_entropy(self.policy, batch)
        if len(batch) and self.reference is not None:
            with self.clock("log_probs"):
                batch.reference_log_probs = self.algo.log_probs(self.reference, batch)
        self.algo.entropy_coef = entropy_coefficient(cfg.algo, self.global_entropy(entropy, batch))
        start = time.perf_counter()
        losses = self.algo.update(batch, self.minibatch_plan(step, kept))
        update_s = time.perf_counter() - start
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
        )

    def generate(self, step: int, indices: list[int], examples: list[Example]) -> Completions:
        """G sampled completions of each prompt, with the noise of its global index and the step
        (completion j its j-th draw), the prompt fed once for all G."""
        tokenizer, group = self.tokenizer, self.group_size
        with self.clock("generate"):
            rows = [tokenizer.encode(e.prompt, "task prompt") for e in examples]
            prompts, prompt_mask = left_padded(rows, tokenizer.pad_id, self.device)
            seeds = [completion_seed(self.cfg.train.seed, step, i) for i in indices]
            with autocast(self.device, self.autocast):
                return generate(
                    self.policy, prompts, prompt_mask, self.cfg.algo.max_new_tokens, tokenizer.eos_id,
                    tokenizer.pad_id, self.sampling, seeds, copies=group,
                    keep_log_probs=self.autocast is None,
                )  # fmt: skip

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
        if self.reference is not None:
            modules["reference"] = self.reference
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
