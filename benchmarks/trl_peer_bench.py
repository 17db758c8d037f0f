"""GRPO against TRL: time to a held-out exact-match target of distrl's GRPO and of TRL's
``GRPOTrainer`` (trl==1.16.0, in its own venv) on the same task, model and initial weights, on CPU,
offline. Interleaved seeds (distrl, TRL, distrl, TRL, ...), medians.

    python benchmarks/trl_peer_bench.py --setup      # build benchmarks/.trl-venv, print its packages
    python benchmarks/trl_peer_bench.py [--seeds 1 2 3] [--target 0.95] [--cap-s 1200]
        [--config configs/grpo_reverse.yaml] [--no-curriculum] [--trl-padding-positions]
        [--trl-padding-in-vocab]
        [--keep DIR] [key=value ...]
    python benchmarks/trl_peer_bench.py --quick      # 1 seed, a 60 s cap: a smoke test

The task is distrl's config (default configs/grpo_reverse.yaml: reverse a string of 1-3 digits),
with the extra ``key=value`` overrides given to both sides. Per seed, before anything is timed:
  * the initial weights: the bench seeds torch with ``seed_torch(seed, 0)`` and builds
    ``TransformerLM(task_tokenizer(cfg.task).vocab_size, cfg.model.transformer)``, as
    ``GRPORunner.__init__`` does before any other torch random draw (seed_torch, then tokenizer,
    prompt source and reward functions, none of which touch torch's generator, then the model:
    read in src/distrl/runners/grpo.py, not checked at run time). ``save_as_transformers`` writes
    that model and the character tokenizer as a transformers GPT-2 directory, which TRL loads
    offline: TRL starts from exactly distrl's initial weights;
  * the prompts: distrl's ``PromptSource`` writes every training prompt of the run in the order
    distrl draws them (prompt i of update u at the curriculum's progress of update u) and the
    ``eval.episodes`` held-out prompts distrl evaluates on. TRL reads them unshuffled
    (``shuffle_dataset=False``), P prompts x G completions a step, so it trains on the same
    prompts in the same order, curriculum included. ``--no-curriculum`` sets
    ``task.curriculum_fraction=0`` for both (every prompt at any length from the start);
  * the reward: distrl's own verifier functions (their source, read with ``inspect``, runs in the
    TRL worker) on the completion up to its end token; a completion without one gets
    ``task.unfinished_reward``, as distrl scores it.

TRL's settings are distrl's config mapped one to one: G -> ``num_generations``; prompts per update
x G / M -> ``per_device_train_batch_size`` and ``algo.num_minibatches`` M ->
``steps_per_generation`` (TRL 1.16 counts completions there: with
``gradient_accumulation_steps=1`` one generation batch of P x G completions makes M optimiser
steps, as a distrl update with 1 epoch and M minibatches does); ``max_new_tokens`` ->
``max_completion_length`` (both count the end token); temperature, top-k (None -> 0), top-p; lr
with linear decay to zero over ``ceil(total_steps / (P x G))`` updates of M steps (distrl's
``anneal_lr`` keeps one rate per update, TRL's decays step by step); AdamW (torch's, fused, betas
0.9/0.999, ``adam_eps``, weight decay),
``max_grad_norm``; ``epsilon``/``epsilon_high`` from ``ratio_clip_min``/``ratio_clip_max``;
``loss_type="dapo"`` for distrl's token normalisation (TRL's ``dapo`` divides the sum over all
completion tokens by their count in the global batch: distrl's ``token``; ``grpo`` for
``sequence``); ``scale_rewards="none"`` (``"group"`` with ``scale_by_std``); ``beta=kl_coef``
(0: no reference model on either side); ``entropy_coef`` as it is; float32 unless distrl's
config resolves to bf16; one torch thread each (``train.torch_threads``). distrl's default
leave-one-out baseline gives G/(G-1) times TRL's mean-baseline advantage, so TRL's rewards are
multiplied by G/(G-1): identical advantages.

The stop rule, one function for both: every ``eval.every`` updates each side scores greedy
completions of the same ``eval.episodes`` held-out prompts (exact match: ended, and the text
before the end token is the answer); a run reaches the target at the first update whose score is
at least ``--target``; an update ending after ``--cap-s`` seconds does not count. Time is
measured from the start of the training loop (distrl's ``time_s``; TRL's ``on_train_begin``) to
the end of that update, evaluations included; process start-up (imports, model load, dataset) is
left out on both sides. The bench reads each side's per-update rows as they are written and
kills the process once the rule has decided (distrl runs with ``train.stop_return`` unset).
Generated tokens/s: the median over a run's updates of completion tokens (end token included)
over the generation time of the update.

What still differs is listed in ``DIFFERENCES`` below and printed under the table. The largest:
TRL's loss forward passes no ``position_ids``, so GPT-2's learned positions count the left
padding of shorter prompts there, while generation (transformers derives positions from the
attention mask) and distrl count real tokens only: TRL would train a policy other than the one it
sampled from. The worker gives the loss forward positions from the attention mask in a forward
pre-hook, as transformers' generate computes them; ``--trl-padding-positions`` runs TRL unchanged.

The padding token is not in distrl's policy (generation never picks it, the loss's log-probabilities
and entropies leave it out). TRL's generate suppresses it (the exported generation config), but its
loss (``add_fused_lm_head``) normalises log-probabilities and entropies over the whole vocabulary:
padding is never sampled, so no reward holds its probability down while the entropy bonus raises it
(on a solved prompt, whose advantages are zero, the bonus is the whole gradient). Left so, TRL does not
reach 0.95 on the reversal task, and distrl with its loss normalised TRL's way fails alike. The worker
gives GPT-2's output layer a constant, untrained bias of -1e9 on padding, so every forward (generate,
greedy evaluation, TRL's loss) has distrl's distribution; ``--trl-padding-in-vocab`` leaves it out.

TRL's venv (benchmarks/.trl-venv) is built on first use or with ``--setup``: torch==2.13.0 first
(the CPU wheel on local disk; a later package pulling torch would fetch a CUDA build), then
trl==1.16.0 with transformers==5.24.0 (distrl's venv has the same transformers) and whatever pip
resolves for them from the local registry. Nothing is downloaded at run time (the HF offline
switches are set).
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cartpole_bench import CommandFailed, ensure_venv, env_without_launcher  # noqa: E402

from distrl.config.run import RunConfig, load_config  # noqa: E402
from distrl.io.metrics import METRICS_FILE  # noqa: E402
from distrl.models.sequence_policy import SequencePolicy  # noqa: E402
from distrl.models.transformer import TransformerLM  # noqa: E402
from distrl.models.transformers_export import save_as_transformers  # noqa: E402
from distrl.precision import low_precision  # noqa: E402
from distrl.seeding import seed_torch  # noqa: E402
from distrl.tasks.prompts import Example, PromptSource, task_tokenizer  # noqa: E402
from distrl.tasks.verifiers import BUILT_IN  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "configs" / "grpo_reverse.yaml"
TRL_VENV = REPO / "benchmarks" / ".trl-venv"
TRL_PACKAGES = ["trl==1.16.0", "transformers==5.24.0"]
DISTRL = "distrl"
TRL = "TRL `GRPOTrainer`"
COMMON = [
    "train.stop_return=null",  # the bench applies the stop rule (held-out exact match) to both
    "train.device=cpu",
    "log.progress=false",
    "log.tensorboard=false",  # TRL runs with report_to="none"
    "checkpoint.interval_steps=1000000000",  # TRL saves nothing either (only distrl's final one)
]
"""Overrides of the config for every distrl run (and for the config the TRL side reads)."""
POLL_S = 0.5
STARTUP_ALLOWANCE_S = 300.0
"""A process still running this long past ``--cap-s`` (start-up included) is killed."""
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
EXACT = "heldout/exact_match"
DIFFERENCES = [
    "sampling noise: distrl draws Gumbel-max noise seeded per prompt (draw j for its completion j), "
    "TRL `torch.multinomial` under the trainer's seed (the same distribution, other draws)",
    "generation code: distrl's own KV-cache loop, TRL's transformers `generate` (GPT-2, SDPA attention); "
    "greedy evaluation likewise",
    "padding: TRL's side runs with a -1e9 output bias on the padding token (neither side can sample or "
    "score it); with `--trl-padding-in-vocab` TRL's loss normalises log-probabilities and entropies over "
    "the whole vocabulary (padding included) while its sampling suppresses padding",
    "work per update: distrl keeps each token's log-probability and entropy as it generates it (no pass "
    "over the batch before the update; the first step's ratio is 1 within float rounding); TRL reuses its "
    "loss pass's detached log-probabilities when one optimiser step takes the batch and runs a no-grad "
    "pass otherwise (`steps_per_generation` > 1), and computes entropies for its metrics",
    "generation time: distrl's (its `generated_tokens_per_s`) spans the update's start (prompts, "
    "encoding, noise seeds) to the end of decoding, the sampling log-probabilities and entropies "
    "included; TRL's its `model.generate` call only",
    "rewards are float64 in distrl, float32 in TRL; a group of equal rewards has exactly zero advantage "
    "in distrl, TRL's `r - mean` may leave a float residue",
    "with `loss_normalization: sequence`, TRL's entropy bonus stays a token mean (distrl's follows the "
    "loss); with `kl_coef` > 0, TRL's k3 estimate is not clamped (distrl's `kl_*_clamp`)",
    "with `num_minibatches` M > 1: distrl cuts each update's prompts into M minibatches of whole groups "
    "and normalises each step by its own tokens; TRL shuffles the completions and normalises each step "
    "by the generation batch's tokens / M",
    "`algo.entropy_target` (an entropy floor raising the bonus while the policy's entropy is low) is "
    "distrl's own: TRL keeps `entropy_coef` fixed (run both with `algo.entropy_target=null` to leave it out)",
]
"""What the mapping cannot make equal, printed under the table."""
LOSS_TYPES = {"token": "dapo", "sequence": "grpo"}
"""distrl's ``loss_normalization`` -> TRL's ``loss_type`` (one process, one step per generation)."""

WORKER = '''
import json
import sys
import time

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig, TrainerCallback
from trl import GRPOConfig, GRPOTrainer

spec = json.loads(open(sys.argv[1]).read())
torch.set_num_threads(spec["threads"])
tokenizer = AutoTokenizer.from_pretrained(spec["model_dir"], local_files_only=True)
model = AutoModelForCausalLM.from_pretrained(spec["model_dir"], local_files_only=True)
EOS, PAD = tokenizer.eos_token_id, tokenizer.pad_token_id
TOKENS = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
VERIFIERS = {name: globals()[name] for name, _ in spec["rewards"]}


def read_rows(path):
    return [json.loads(line) for line in open(path)]


def decode(ids):
    """distrl's CharTokenizer.decode: the text before the first end token, padding skipped."""
    chars = []
    for index in ids:
        if index == EOS:
            break
        if index != PAD:
            chars.append(TOKENS[index])
    return "".join(chars)


returns = []
"""Each step's mean reward as distrl scores it (before the leave-one-out factor)."""


def distrl_reward(prompts, completion_ids, answer, **_):
    scores = [
        sum(w * VERIFIERS[name](p, decode(ids), a) for name, w in spec["rewards"])
        if EOS in ids
        else spec["unfinished_reward"]
        for p, ids, a in zip(prompts, completion_ids, answer, strict=True)
    ]
    returns.append(sum(scores) / len(scores))
    return [spec["reward_scale"] * score for score in scores]


def real_token_positions(module, args, kwargs):
    """Positions that count real tokens only (left padding skipped), as generate and distrl use."""
    mask = kwargs.get("attention_mask")
    if kwargs.get("position_ids") is None and mask is not None and mask.dim() == 2:
        kwargs["position_ids"] = (mask.long().cumsum(-1) - 1).clamp(min=0)
    return args, kwargs


if spec["real_token_positions"]:
    model.register_forward_pre_hook(real_token_positions, with_kwargs=True)

if spec["padding_out_of_vocab"]:
    # Padding out of the policy, as in distrl: the fused LM head of TRL's loss reads lm_head.bias too.
    bias = torch.zeros(model.config.vocab_size)
    bias[PAD] = -1e9
    model.lm_head.bias = torch.nn.Parameter(bias, requires_grad=False)

generate = model.generate
generated = [0, 0.0]
"""Completion tokens (end token included) and seconds in TRL's generate calls since the last row."""


def timed_generate(*args, **kwargs):
    start = time.perf_counter()
    out = generate(*args, **kwargs)
    generated[1] += time.perf_counter() - start
    is_eos = (out[:, kwargs["input_ids"].shape[1] :] == EOS).int()
    generated[0] += int(((is_eos.cumsum(1) - is_eos) == 0).sum())
    return out


model.generate = timed_generate

heldout = read_rows(spec["heldout"])
encoded = tokenizer([e["prompt"] for e in heldout], padding=True, return_tensors="pt")
greedy = GenerationConfig(
    max_new_tokens=spec["max_new_tokens"], do_sample=False, eos_token_id=EOS, pad_token_id=PAD
)


def heldout_exact_match():
    model.eval()
    with torch.no_grad():
        out = generate(
            input_ids=encoded["input_ids"], attention_mask=encoded["attention_mask"], generation_config=greedy
        )
    model.train()
    completions = out[:, encoded["input_ids"].shape[1] :].tolist()
    hits = [EOS in ids and decode(ids) == e["answer"] for e, ids in zip(heldout, completions, strict=True)]
    return sum(hits) / len(hits)


class Rows(TrainerCallback):
    """One metrics row per update (steps_per_update optimiser steps on one generation batch), with
    distrl's keys; held-out exact match every eval_every updates."""

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = time.perf_counter()
        self.out = open(spec["rows"], "w")

    def on_step_end(self, args, state, control, **kwargs):
        update, within = divmod(state.global_step, spec["steps_per_update"])
        if within:
            return
        row = {
            "global_step": update * spec["completions_per_step"],
            "generated_tokens_per_s": generated[0] / generated[1],
            "episode_return_mean": returns[-1],
        }
        generated[:] = [0, 0.0]
        if update % spec["eval_every"] == 0:
            row["heldout/exact_match"] = heldout_exact_match()
        row["time_s"] = time.perf_counter() - self.start
        self.out.write(json.dumps(row) + "\\n")
        self.out.flush()


trainer = GRPOTrainer(
    model=model,
    reward_funcs=distrl_reward,
    args=GRPOConfig(**spec["grpo"]),
    train_dataset=Dataset.from_list(read_rows(spec["train"])),
    processing_class=tokenizer,
    callbacks=[Rows()],
)
trainer.train()
'''
"""TRL's side, run in TRL's venv with a spec file (``trl_spec``); distrl's verifier functions are
put before it."""


@dataclass(frozen=True)
class Run:
    stop: str
    """``target`` (reached), ``cap`` (out of time), ``budget`` (``train.total_steps`` done) or
    ``crashed: <its last line>`` (the process failed; its rows up to then are judged)."""
    completions: int
    """Completions generated by the last counted update."""
    seconds: float
    """Training-loop seconds at the end of the last counted update."""
    final_exact: float | None
    """The last held-out exact match at or before the stop."""
    tokens_per_s: float | None
    """Median over the counted updates of generated tokens/s."""

    @property
    def reached(self) -> bool:
        return self.stop == "target"


@dataclass(frozen=True)
class StopRule:
    target: float
    cap_s: float

    def judge(self, rows: list[dict[str, Any]], otherwise: str | None) -> Run | None:
        """The run as the rule sees it from its per-update rows; where they do not decide it, it
        stopped for ``otherwise`` (None: it is still undecided)."""
        counted: list[dict[str, Any]] = []
        stop = otherwise
        for row in rows:
            if row["time_s"] > self.cap_s:
                stop = "cap"
                break
            counted.append(row)
            if row.get(EXACT, -math.inf) >= self.target:
                stop = "target"
                break
        if stop is None:
            return None
        scores = [row[EXACT] for row in counted if EXACT in row]
        rates = [row["generated_tokens_per_s"] for row in counted]
        return Run(
            stop,
            counted[-1]["global_step"] if counted else 0,
            counted[-1]["time_s"] if counted else 0.0,
            scores[-1] if scores else None,
            statistics.median(rates) if rates else None,
        )


def complete_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a JSONL file being written (a last line without its newline is left out)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines(keepends=True) if line.endswith("\n")]


def watch(cmd: list[str], rows_path: Path, log_path: Path, rule: StopRule, env: dict[str, str]) -> Run:
    """Run ``cmd`` until ``rule`` decides on the rows it writes to ``rows_path`` (then kill it)
    or it exits; its output goes to ``log_path``."""
    with log_path.open("w") as log:
        process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.monotonic() + rule.cap_s + STARTUP_ALLOWANCE_S
        try:
            while process.poll() is None and time.monotonic() < deadline:
                if rule.judge(complete_rows(rows_path), otherwise=None) is not None:
                    break
                time.sleep(POLL_S)
        finally:
            killed = process.poll() is None
            if killed:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
    rows = complete_rows(rows_path)
    if not killed and process.returncode != 0:
        lines = log_path.read_text().splitlines()
        if not rows:  # it never trained: the bench's own setup is at fault
            raise CommandFailed(
                f"failed (exit {process.returncode}): {' '.join(cmd)}\n" + "\n".join(lines[-40:])
            )
        # A run that fails mid-training (TRL's sampling has met NaN probabilities) is an outcome.
        otherwise = f"crashed: {lines[-1] if lines else process.returncode}"
    else:  # killed: the rule decided, or the deadline passed (cap); exited: the budget was used
        otherwise = "cap" if killed else "budget"
    run = rule.judge(rows, otherwise=otherwise)
    assert run is not None  # a stop reason was given
    return run


# ----------------------------------------------------------------------------------- TRL's inputs
def updates(cfg: RunConfig) -> int:
    """Updates of a run that is not stopped early (distrl trains until ``total_steps``)."""
    return math.ceil(cfg.train.total_steps / completions_per_step(cfg))


def completions_per_step(cfg: RunConfig) -> int:
    return cfg.algo.num_prompts_per_step * cfg.algo.num_generations_per_prompt


def refuse_unmapped(cfg: RunConfig) -> None:
    """Exit on settings the TRL side does not reproduce."""
    algo = cfg.algo
    problems = []
    if algo.name != "grpo":
        problems.append(f"algo.name={algo.name}: this bench compares GRPO")
    if algo.update_epochs != 1 or cfg.train.gradient_accumulation_steps != 1:
        problems.append("algo.update_epochs and train.gradient_accumulation_steps must be 1")
    if completions_per_step(cfg) % algo.num_minibatches:
        problems.append("algo.num_minibatches must divide the completions per update")
    if algo.dynamic_sampling:
        problems.append("algo.dynamic_sampling: TRL's GRPOTrainer has none")
    if algo.kl_coef > 0 and algo.kl_estimator != "k3":
        problems.append(f"algo.kl_estimator={algo.kl_estimator}: TRL's KL penalty is k3")
    unknown = [r.function for r in cfg.task.rewards if r.function not in BUILT_IN]
    if unknown:
        problems.append(f"task.rewards {unknown}: only distrl's built-in verifiers are sent to the TRL side")
    if problems:
        sys.exit("trl_peer_bench: " + "; ".join(problems))


def training_examples(cfg: RunConfig) -> list[Example]:
    """Every training prompt of a full run, in distrl's order (``GRPORunner.iteration``)."""
    source = PromptSource(cfg.task, cfg.train.seed, held_out_side=False)
    per_step, total = cfg.algo.num_prompts_per_step, cfg.train.total_steps
    return [
        source.example(step * per_step + i, step * completions_per_step(cfg) / total)
        for step in range(updates(cfg))
        for i in range(per_step)
    ]


def heldout_examples(cfg: RunConfig) -> list[Example]:
    """The held-out prompts distrl evaluates on (``eval.completions.score_held_out``, 1 rank)."""
    source = PromptSource(cfg.task, cfg.train.seed, held_out_side=True)
    return [source.example(cfg.eval.seed + i) for i in range(cfg.eval.episodes)]


def write_jsonl(path: Path, examples: list[Example]) -> None:
    path.write_text("".join(json.dumps({"prompt": e.prompt, "answer": e.answer}) + "\n" for e in examples))


def export_initial_model(cfg: RunConfig, out: Path) -> None:
    """distrl's initial policy for ``train.seed`` (see the docstring) as a transformers directory."""
    seed_torch(cfg.train.seed, 0)
    tokenizer = task_tokenizer(cfg.task)
    model = TransformerLM(tokenizer.vocab_size, cfg.model.transformer)
    save_as_transformers(SequencePolicy(model, tokenizer, cfg.algo.max_new_tokens), out)


def trl_arguments(cfg: RunConfig, out: Path) -> dict[str, Any]:
    """``GRPOConfig`` keyword arguments equivalent to distrl's config (see the docstring)."""
    algo = cfg.algo
    return {
        "output_dir": str(out),
        "per_device_train_batch_size": completions_per_step(cfg) // algo.num_minibatches,
        "steps_per_generation": algo.num_minibatches,
        "gradient_accumulation_steps": 1,
        "num_generations": algo.num_generations_per_prompt,
        "num_iterations": 1,
        "shuffle_dataset": False,
        "max_completion_length": algo.max_new_tokens,
        "temperature": algo.temperature,
        "top_k": algo.top_k or 0,
        "top_p": algo.top_p,
        "learning_rate": algo.learning_rate,
        "lr_scheduler_type": "linear" if algo.anneal_lr else "constant",
        "warmup_steps": 0,
        "max_steps": updates(cfg) * algo.num_minibatches,
        "optim": "adamw_torch_fused",
        "adam_beta1": 0.9,
        "adam_beta2": 0.999,
        "adam_epsilon": algo.adam_eps,
        "weight_decay": algo.weight_decay,
        "max_grad_norm": algo.max_grad_norm,
        "epsilon": algo.ratio_clip_min,
        "epsilon_high": algo.ratio_clip_max,
        "loss_type": LOSS_TYPES[algo.loss_normalization],
        "scale_rewards": "group" if algo.scale_by_std else "none",
        "beta": algo.kl_coef,
        "entropy_coef": algo.entropy_coef,
        "bf16": low_precision(cfg.train.mixed_precision, torch.device("cpu"), heavy_model=True) is not None,
        "fp16": False,
        "use_cpu": True,
        "gradient_checkpointing": cfg.train.activation_checkpointing,
        "seed": cfg.train.seed,
        "report_to": "none",
        "save_strategy": "no",
        "logging_steps": cfg.eval.every * algo.num_minibatches,
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
    }


def trl_spec(cfg: RunConfig, work: Path, real_token_positions: bool, padding_out_of_vocab: bool) -> Path:
    """Write TRL's inputs for one seed under ``work``: model, prompts and the spec file."""
    work.mkdir(parents=True)
    export_initial_model(cfg, work / "model")
    write_jsonl(work / "train.jsonl", training_examples(cfg))
    write_jsonl(work / "heldout.jsonl", heldout_examples(cfg))
    group = cfg.algo.num_generations_per_prompt
    spec = {
        "model_dir": str(work / "model"),
        "train": str(work / "train.jsonl"),
        "heldout": str(work / "heldout.jsonl"),
        "rows": str(work / METRICS_FILE),
        "threads": cfg.train.torch_threads,
        "rewards": [[r.function, r.weight] for r in cfg.task.rewards],
        "unfinished_reward": cfg.task.unfinished_reward,
        "reward_scale": group / (group - 1) if cfg.algo.baseline == "leave_one_out" else 1.0,
        "real_token_positions": real_token_positions,
        "padding_out_of_vocab": padding_out_of_vocab,
        "max_new_tokens": cfg.algo.max_new_tokens,
        "completions_per_step": completions_per_step(cfg),
        "steps_per_update": cfg.algo.num_minibatches,
        "eval_every": cfg.eval.every,
        "grpo": trl_arguments(cfg, work / "trainer"),
    }
    path = work / "spec.json"
    path.write_text(json.dumps(spec, indent=1))
    return path


def worker_source(cfg: RunConfig) -> str:
    """The TRL worker, preceded by the source of the verifier functions the task uses."""
    functions = sorted({r.function for r in cfg.task.rewards})
    return "\n\n".join([*(inspect.getsource(BUILT_IN[name]) for name in functions), WORKER])


# ------------------------------------------------------------------------------------------- venv
def ensure_trl() -> Path:
    """TRL's venv, built if missing; exits saying why when TRL cannot be installed or imported."""
    try:
        python = ensure_venv(TRL_VENV, TRL_PACKAGES)
    except subprocess.CalledProcessError as exc:
        sys.exit(
            f"TRL could not be installed: `{' '.join(map(str, exc.cmd))}` exited {exc.returncode} (above)."
        )
    check = (
        "import torch, transformers, trl; print(torch.__version__, transformers.__version__, trl.__version__)"
    )
    done = subprocess.run([str(python), "-c", check], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"TRL is installed in {TRL_VENV} but does not import:\n{done.stderr}")
    return python


def print_installed(python: Path) -> None:
    listed = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True, check=True
    )
    print(f"{TRL_VENV}:\n{listed.stdout}")


# ------------------------------------------------------------------------------------------- runs
def measure(args: argparse.Namespace, python: Path, tmp: Path) -> dict[str, list[Run]]:
    """Contender -> its run per seed, seed by seed (distrl, TRL, distrl, TRL, ...)."""
    rule = StopRule(args.target, args.cap_s)
    runs: dict[str, list[Run]] = {DISTRL: [], TRL: []}
    for seed in args.seeds:
        overrides = [*COMMON, *args.overrides, f"train.seed={seed}"]
        cfg = load_config(args.config, overrides)
        refuse_unmapped(cfg)
        work = tmp / f"seed{seed}"
        spec = trl_spec(
            cfg,
            work / "trl",
            real_token_positions=not args.trl_padding_positions,
            padding_out_of_vocab=not args.trl_padding_in_vocab,
        )
        worker = work / "trl_worker.py"
        worker.write_text(worker_source(cfg))
        distrl_dir = work / "distrl"
        train = [sys.executable, "-m", "distrl", "train", "--config", str(args.config)]
        train += ["--run-dir", str(distrl_dir), "--overwrite", *overrides]
        runs[DISTRL].append(
            watch(train, distrl_dir / METRICS_FILE, work / "distrl.log", rule, env_without_launcher())
        )
        trl = [str(python), str(worker), str(spec)]
        env = {**env_without_launcher(), **OFFLINE}
        runs[TRL].append(watch(trl, work / "trl" / METRICS_FILE, work / "trl.log", rule, env))
    return runs


MEDIAN_FORMATS = (",.0f", ".1f", ".3f", ",.0f")
"""Completions, seconds, exact match, tokens/s."""


def median_of(runs: list[Run], value: Callable[[Run], float | None]) -> float | None:
    values = [v for v in map(value, runs) if v is not None]
    return statistics.median(values) if values else None


def shown(value: float | None, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def print_table(runs: dict[str, list[Run]], args: argparse.Namespace, cfg: RunConfig) -> None:
    curriculum = "off (`--no-curriculum`)" if args.no_curriculum else f"{cfg.task.curriculum_fraction:g}"
    print(
        f"machine: {os.cpu_count()} cores, CPU, {cfg.train.torch_threads} torch thread(s) a process; config "
        f"{' '.join([args.config.name, *args.overrides])}; curriculum {curriculum} (the same prompt order "
        "on both sides); "
        f"target: held-out exact match >= {args.target:g} on {cfg.eval.episodes} prompts, checked every "
        f"{cfg.eval.every} updates of {completions_per_step(cfg)} completions; cap {args.cap_s:g} s of "
        f"training time; TRL positions: "
        f"{'as TRL gives them' if args.trl_padding_positions else 'real tokens only (pre-hook)'}; TRL's "
        f"padding token: {'in its loss' if args.trl_padding_in_vocab else 'out of vocabulary (-1e9 bias)'}\n"
    )
    print(
        "| contender | seed | reached target | completions at stop | seconds at stop | final held-out exact "
        "match | generated tokens/s (median) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    medians: dict[str, tuple[float | None, ...]] = {}
    for name, contender_runs in runs.items():
        for seed, run in zip(args.seeds, contender_runs, strict=True):
            reached = "yes" if run.reached else f"no ({run.stop})"
            print(
                f"| {name} | {seed} | {reached} | {run.completions:,} | {run.seconds:.1f} | "
                f"{shown(run.final_exact, '.3f')} | {shown(run.tokens_per_s, ',.0f')} |"
            )
        reached = [run for run in contender_runs if run.reached]
        medians[name] = (
            median_of(reached, lambda r: r.completions),
            median_of(reached, lambda r: r.seconds),
            median_of(contender_runs, lambda r: r.final_exact),
            median_of(contender_runs, lambda r: r.tokens_per_s),
        )
        cells = [shown(value, spec) for value, spec in zip(medians[name], MEDIAN_FORMATS, strict=True)]
        print(f"| **{name}, median** | – | {len(reached)}/{len(contender_runs)} | {' | '.join(cells)} |")
    ratios = [
        "–" if a is None or b is None or b == 0 else f"{a / b:.2f}x"
        for a, b in zip(medians[DISTRL], medians[TRL], strict=True)
    ]
    print(f"| **distrl / TRL** | – | – | {ratios[0]} | {ratios[1]} | {ratios[2]} | {ratios[3]} |")
    print(
        "\nCompletions and seconds medians are over the runs that reached the target; seconds run from the "
        "start of the training loop to the end of the update whose evaluation reached it (evaluations "
        "included, start-up not). What still differs:"
    )
    for difference in DIFFERENCES:
        print(f"- {difference}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides for both sides")
    parser.add_argument("--setup", action="store_true", help="build TRL's venv, print its packages, exit")
    parser.add_argument("--quick", action="store_true", help="smoke test: the first seed, a 60 s cap")
    parser.add_argument("--config", type=Path, default=CONFIG)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--target", type=float, default=0.95, help="held-out exact match to reach")
    parser.add_argument("--cap-s", type=float, default=1200.0, help="training seconds a run may take")
    parser.add_argument("--no-curriculum", action="store_true", help="task.curriculum_fraction=0 for both")
    parser.add_argument(
        "--trl-padding-positions", action="store_true", help="leave TRL's loss forward without position_ids"
    )
    parser.add_argument(
        "--trl-padding-in-vocab",
        action="store_true",
        help="leave TRL's loss normalising over the whole vocabulary, padding included",
    )
    parser.add_argument("--keep", type=Path, help="keep the runs (models, prompts, rows, logs) in this dir")
    args = parser.parse_args()
    if args.keep is not None and args.keep.exists() and any(args.keep.iterdir()):
        parser.error(f"--keep {args.keep}: not empty (old rows would be read as new ones)")
    python = ensure_trl()
    if args.setup:
        print_installed(python)
        return
    if args.quick:
        args.seeds, args.cap_s = args.seeds[:1], 60.0
    if args.no_curriculum:
        args.overrides.append("task.curriculum_fraction=0")
    cfg = load_config(args.config, [*COMMON, *args.overrides])
    with tempfile.TemporaryDirectory(prefix="trl-peer-bench-") as tmp:
        try:
            runs = measure(args, python, args.keep or Path(tmp))
        except CommandFailed as exc:
            sys.exit(str(exc))
    print_table(runs, args, cfg)


if __name__ == "__main__":
    main()
