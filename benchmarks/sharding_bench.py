"""Sharded learners (``train.sharding``) against replicated ones: each rank's peak memory over a
whole GRPO step (generation included) and the step time, on a Llama-architecture policy built in
code (``models/local_lm.py``: random weights, a byte-level BPE tokenizer of 32k tokens trained on
made-up text; nothing is downloaded).

Each contender is ``torchrun`` of ``distrl.train`` on ``configs/grpo_reverse.yaml`` with the model
as ``model.transformer.pretrained``, float32 and Adam, a few small GRPO steps. Read from its
``metrics.jsonl``: ``usage/rank<r>/peak_rss_mb``, each rank's resident-set high-water mark since
the previous update (reset after each reading), so the first update, which also covers loading the
model, is left out; the figure is the largest over the later updates and the ranks. Each
minibatch of 16 completions is 4 micro-batches (``train.gradient_accumulation_steps``), so that
activations (about 1 GB for all 16 at once) do not hide what sharding saves. Step time:
the median ``time/update`` of the later updates. FSDP's ``reshard_after_forward`` is on (each
block's weights are freed after its forward pass). ``algo.generation_weights``: generation (and
the log-probability passes) on the weights gathered whole once per step, or on the shards, a
layer gathered at a time, the ranks decoding in lockstep.

Contenders run one at a time (2 cores), ``--repeats`` times interleaved; medians reported.

Usage: python benchmarks/sharding_bench.py [--layers 16] [--width 768] [--repeats 2] [--steps 4]
       [--ranks 1:none 2:none 2:fsdp:gathered 2:fsdp:sharded 4:fsdp:sharded]
   or: python benchmarks/sharding_bench.py --largest GIB [--largest-modes none fsdp:sharded]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / "benchmarks" / ".cache"
COMPLETIONS_PER_STEP = 16


def local_llama(layers: int, width: int) -> tuple[Path, int]:
    """The benchmark's model directory (made once, kept under benchmarks/.cache) and its size."""
    from transformers import PreTrainedTokenizerFast

    from distrl.models.local_lm import LMShape, bpe_tokenizer, synthetic_text, write_local_lm

    directory = CACHE / f"llama-{layers}x{width}"
    marker = directory / "parameters.txt"
    if not marker.exists():
        vocabulary = CACHE / "bpe-32k"
        if not vocabulary.exists():
            bpe_tokenizer(synthetic_text(200_000), 32_000).save_pretrained(vocabulary)
        tokenizer = PreTrainedTokenizerFast.from_pretrained(vocabulary)
        heads = width // 64
        shape = LMShape(width, layers, heads, max(heads // 3, 1), context=256, mlp_width=8 * width // 3)
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(str(write_local_lm(directory, "llama", shape, tokenizer)))
    return directory, int(marker.read_text())


def run(
    ranks: int, sharding: str, generation: str, model: Path, steps: int, cap: Path | None = None
) -> dict[str, float] | None:
    """One torchrun launch: the peak RSS (MiB) of the most loaded rank over the updates after the
    first, and their median update time; ``cap``: a memory cgroup the launch runs in, None when it
    ran out of memory there."""
    with tempfile.TemporaryDirectory() as run_dir:
        command = [
            sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={ranks}", "--nnodes=1",
            "--master_addr=127.0.0.1", "--master_port=29633", "-m", "distrl.train",
            "--config", str(REPO / "configs" / "grpo_reverse.yaml"), "--run-dir", run_dir, "--distributed",
            f"model.transformer.pretrained={model}", f"train.sharding={sharding}",
            f"algo.generation_weights={generation}",
            "train.mixed_precision=fp32", "algo.num_prompts_per_step=4", "algo.num_generations_per_prompt=4",
            "algo.max_new_tokens=16", "algo.update_epochs=1", "algo.num_minibatches=1",
            "train.gradient_accumulation_steps=4",
            f"train.total_steps={steps * COMPLETIONS_PER_STEP}", "train.stop_return=null", "eval.every=1000",
            "log.progress=false", "log.tensorboard=false", "checkpoint.interval_steps=1000000",
        ]  # fmt: skip
        if cap is not None:  # the launch and every rank it starts in the cgroup
            command = ["sh", "-c", f'echo $$ > {cap}/cgroup.procs && exec "$@"', "sh", *command]
        done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, check=False)
        out_of_memory = ("SIGKILL", "can't allocate memory", "MemoryError", "Cannot allocate memory")
        if done.returncode != 0 and cap is not None and any(sign in done.stderr for sign in out_of_memory):
            return None
        if done.returncode != 0:
            sys.exit(f"{ranks} rank(s), sharding {sharding}, {generation} failed:\n{done.stderr[-3000:]}")
        rows = [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()][1:]
    peaks = [row[f"usage/rank{r}/peak_rss_mb"] for row in rows for r in range(ranks)]
    return {"peak_rss_mb": max(peaks), "update_s": statistics.median(row["time/update"] for row in rows)}


def largest(sharding: str, generation: str, width: int, cap_gib: float, steps: int) -> tuple[int, int]:
    """The most layers (and their parameters) of a Llama of ``width`` that 2 ranks train with
    ``sharding`` inside a memory cgroup of ``cap_gib`` for the whole launch (doubling, then
    bisecting)."""
    cap = Path(f"/sys/fs/cgroup/memory/distrl-sharding-bench-{os.getpid()}")
    try:
        cap.mkdir()
        (cap / "memory.limit_in_bytes").write_text(str(int(cap_gib * 2**30)))
    except OSError as exc:
        sys.exit(f"--largest needs a writable cgroup-v1 memory controller ({exc})")

    def trains(layers: int) -> bool:
        return run(2, sharding, generation, local_llama(layers, width)[0], steps, cap) is not None

    try:
        if not trains(1):
            return 0, 0
        low, high = 1, 2
        while trains(high):
            low, high = high, 2 * high
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (middle, high) if trains(middle) else (low, middle)
        return low, local_llama(low, width)[1]
    finally:
        cap.rmdir()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--width", type=int, default=768)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--steps", type=int, default=4, help="GRPO updates a launch (the first left out)")
    parser.add_argument(
        "--ranks",
        nargs="+",
        default=["1:none", "2:none", "2:fsdp:gathered", "2:fsdp:sharded", "4:fsdp:sharded"],
        help="contenders, RANKS:SHARDING[:GENERATION_WEIGHTS]",
    )
    parser.add_argument(
        "--largest", type=float, metavar="GIB",
        help="instead: the largest model 2 ranks train, replicated and sharded, in a memory cgroup of GIB",
    )  # fmt: skip
    parser.add_argument(
        "--largest-modes", nargs="+", default=["none", "fsdp:sharded"],
        help="--largest's contenders, SHARDING[:GENERATION_WEIGHTS]",
    )  # fmt: skip
    args = parser.parse_args()
    if args.largest:
        print(
            f"2 ranks, Llama of width {args.width}, the whole launch in a memory cgroup of {args.largest} GiB"
        )
        print("| train.sharding | algo.generation_weights | layers | parameters |")
        print("| --- | --- | --- | --- |")
        for sharding, generation in ((*mode.split(":"), "gathered")[:2] for mode in args.largest_modes):
            layers, parameters = largest(sharding, generation, args.width, args.largest, 2)
            shown = generation if sharding != "none" else "-"
            print(f"| {sharding} | {shown} | {layers} | {parameters / 1e6:.0f}M |")
        return
    model, parameters = local_llama(args.layers, args.width)
    contenders = [
        (int(n), sharding, *(rest or ["gathered"]))
        for n, sharding, *rest in (s.split(":") for s in args.ranks)
    ]
    results: dict[tuple, list[dict[str, float]]] = {c: [] for c in contenders}
    for _ in range(args.repeats):
        for contender in contenders:
            results[contender].append(run(*contender, model, args.steps))
    base = statistics.median(r["peak_rss_mb"] for r in results[contenders[0]])
    print(f"Llama {args.layers} layers x {args.width}: {parameters / 1e6:.1f}M parameters, float32, Adam")
    print(
        "| ranks | train.sharding | algo.generation_weights | peak RSS per rank, MiB | vs first | update s |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for contender in contenders:
        ranks, sharding, generation = contender
        peak = statistics.median(r["peak_rss_mb"] for r in results[contender])
        update = statistics.median(r["update_s"] for r in results[contender])
        shown = generation if sharding != "none" else "-"
        print(f"| {ranks} | {sharding} | {shown} | {peak:,.0f} | {peak / base:.2f}x | {update:.2f} |")


if __name__ == "__main__":
    main()
