"""GRPO's memory options on the shipped GRPO model: what each saves and what it costs.

For each option alone (none: float32 throughout; ``train.activation_checkpointing``;
``train.gradient_accumulation_steps`` = 4; ``train.mixed_precision: bf16``; on CUDA also
``train.optimizer_offload``) a fresh process builds the config's transformer (``--model``
overrides ``model.transformer``) on ``--device`` and one minibatch of completions
(``algo.num_prompts_per_step`` x G rows, prompt and completion filling the context), then takes
optimiser steps on it with the GRPO update and reports:
  * the bytes autograd saved for the backward pass in one step (activation memory, exact);
  * on the CPU, the peak RSS growth of the process over those steps (what the OS saw, MiB); on
    CUDA, the peak GPU memory allocated over them (weights, gradients, optimiser state and
    activations: ``torch.cuda.max_memory_allocated``);
  * the median step time after a warm-up step.
Options are run interleaved, ``--repeats`` times, and medians reported (timings here move +-20%).

Usage: python benchmarks/grpo_memory_bench.py [--config configs/grpo_addition_cpu.yaml]
       [--model "{layers: 4, width: 256, heads: 8, context: 24}"] [--repeats 3] [--steps 5]
       [--batch-rows N] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
FP32 = "train.mixed_precision=fp32"
OPTIONS = {
    "none": [FP32],
    "activation_checkpointing": [FP32, "train.activation_checkpointing=true"],
    "gradient_accumulation_steps=4": [FP32, "train.gradient_accumulation_steps=4"],
    "mixed_precision=bf16": ["train.mixed_precision=bf16"],
}
"""Each option alone, against float32 throughout (``auto`` would pick bf16 on a CPU with bf16
units)."""
CUDA_OPTIONS = {"optimizer_offload": [FP32, "train.optimizer_offload=true"]}
"""Options that mean something on a CUDA model only (the optimiser's state moved to the CPU)."""


def measure(
    config: str, overrides: list[str], steps: int, rows: int | None, device: torch.device
) -> dict[str, float]:
    """One process's figures (run in a fresh process by ``main``)."""

    from distrl.algos.grpo import GRPO
    from distrl.config.run import load_config
    from distrl.models.sequence_policy import sequence_model
    from distrl.precision import low_precision
    from distrl.storage.completions import CompletionBatch
    from distrl.tasks.prompts import task_tokenizer

    torch.set_num_threads(1)
    torch.manual_seed(0)
    cfg = load_config(config, overrides)
    tokenizer = task_tokenizer(cfg.task)
    vocab = tokenizer.vocab_size
    model = sequence_model(cfg, tokenizer).to(device)  # as training builds it (cuDNN attention off)
    model.activation_checkpointing = cfg.train.activation_checkpointing
    rows = rows or cfg.algo.num_prompts_per_step * cfg.algo.num_generations_per_prompt
    length, new = cfg.model.transformer.context, cfg.algo.max_new_tokens
    batch = CompletionBatch(
        torch.randint(2, vocab, (rows, length), device=device),
        torch.ones(rows, length, dtype=torch.bool, device=device),
        torch.ones(rows, new, dtype=torch.bool, device=device),
        torch.randn(rows, device=device),
    )
    autocast = low_precision(cfg.train.mixed_precision, device, heavy_model=True)
    algo = GRPO(
        model,
        cfg.algo,
        0,
        autocast=autocast,
        accumulation_steps=cfg.train.gradient_accumulation_steps,
        optimizer_offload=cfg.train.optimizer_offload,
    )
    batch.old_log_probs = algo.log_probs(model, batch)
    saved = [0]

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        saved[0] += tensor.numel() * tensor.element_size()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        algo.update(batch, [[torch.arange(rows, device=device)]])  # warm-up; counts one step's saved tensors
    # Micro-batches free each part's tensors before the next: the peak is one part's share.
    peak_saved = saved[0] / cfg.train.gradient_accumulation_steps
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        algo.update(batch, [[torch.arange(rows, device=device)]])
        if cuda:
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    peak = (
        torch.cuda.max_memory_allocated(device) / 2**20
        if cuda
        else (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    )
    return {"saved_mib": peak_saved / 2**20, "peak_mib": peak, "step_s": statistics.median(times)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(REPO / "configs" / "grpo_addition_cpu.yaml"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch-rows", type=int, default=None)
    parser.add_argument("--model", help="model.transformer, as YAML")
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # run one option in this process
    args = parser.parse_args()
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    options = OPTIONS | (CUDA_OPTIONS if cuda else {})
    if args.one is not None:
        model = [f"model.transformer={args.model}"] if args.model else []
        print(
            json.dumps(measure(args.config, options[args.one] + model, args.steps, args.batch_rows, device))
        )
        return
    results: dict[str, list[dict[str, float]]] = {name: [] for name in options}
    for _ in range(args.repeats):
        for name in options:
            command = [
                sys.executable,
                __file__,
                "--config",
                args.config,
                "--steps",
                str(args.steps),
                "--device",
                args.device,
                "--one",
                name,
            ]
            if args.batch_rows:
                command += ["--batch-rows", str(args.batch_rows)]
            if args.model:
                command += ["--model", args.model]
            out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
            results[name].append(json.loads(out.splitlines()[-1]))
    base = {key: statistics.median(r[key] for r in results["none"]) for key in results["none"][0]}
    peak = "peak GPU memory allocated MiB" if cuda else "peak RSS growth MiB"
    print(f"machine: {args.device}" + (f" ({torch.cuda.get_device_name(device)})" if cuda else ""))
    print(f"| option | saved for backward MiB | / none | {peak} | step s (median) | / none |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, runs in results.items():
        med = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        print(
            f"| {name} | {med['saved_mib']:.1f} | {med['saved_mib'] / base['saved_mib']:.2f} | "
            f"{med['peak_mib']:.0f} | {med['step_s']:.3f} | {med['step_s'] / base['step_s']:.2f} |"
        )


if __name__ == "__main__":
    main()
