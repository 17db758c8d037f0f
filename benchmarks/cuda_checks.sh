#!/usr/bin/env bash
# The CUDA paths, checked on a machine with one NVIDIA GPU (CI has none): the CUDA-only tests, short
# real training runs on the GPU with every memory option on (single process and torchrun over
# NCCL), checkpoints made on the GPU evaluated and exported, and the GPU figures of the GRPO
# memory options and of Atari PPO's precision switch.
#   bash benchmarks/cuda_checks.sh OUT_DIR     (distrl importable; OUT_DIR gets the logs)
#   ONLY="tests grpo_cuda" bash benchmarks/cuda_checks.sh OUT_DIR    (those steps alone)
set -u
out=${1:?an output directory}
mkdir -p "$out"
py=${PYTHON:-python3}
steps=(tests grpo_cuda grpo_cuda_fp32 grpo_nccl grpo_export lstm_cuda lstm_eval lstm_onnx atari_lstm_cuda
    grpo_memory_bench atari_bench)
for name in ${ONLY:-}; do
    [[ " ${steps[*]} " == *" $name "* ]] || { echo "ONLY names no step '$name'; the steps: ${steps[*]}" >&2; exit 2; }
done
selected() { [[ -z ${ONLY:-} || " $ONLY " == *" $1 "* ]]; }
step() {  # step NAME SECONDS COMMAND...: run with a time limit, log to OUT/NAME.log, say how it ended
    local name=$1 limit=$2
    shift 2
    selected "$name" || return 0
    local start=$SECONDS
    timeout "$limit" "$@" > "$out/$name.log" 2>&1
    local rc=$?
    echo "== $name: exit $rc in $((SECONDS - start)) s"
    tail -n 4 "$out/$name.log"
}

nvidia-smi -L
$py -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))"

step tests 150 $py -m pytest -q -p no:cacheprovider -o addopts= \
    tests/test_memory_options.py tests/models/test_linear.py tests/storage/test_rollout.py \
    tests/models/test_transformer.py tests/algos/test_grpo.py \
    tests/runners/test_grpo.py::test_the_first_step_starts_from_the_generating_policy

# GRPO on the GPU with every memory option on; the shipped small-cluster model on one GPU.
grpo=(--config configs/grpo_small.yaml grpo.gpus_per_node=1 grpo.policy_workers=1 --total-steps 2048
    train.mixed_precision=bf16 train.activation_checkpointing=true train.gradient_accumulation_steps=2
    train.optimizer_offload=true train.cuda_memory_fraction=0.5 log.progress=false)
step grpo_cuda 120 $py -m distrl train "${grpo[@]}" --device cuda --run-dir "$out/grpo" --overwrite
step grpo_cuda_fp32 120 $py -m distrl train "${grpo[@]}" train.mixed_precision=fp32 --device cuda \
    --run-dir "$out/grpo_fp32" --overwrite
for run in grpo_cuda:grpo grpo_cuda_fp32:grpo_fp32; do  # generation's speed, past the first step's warm-up
    selected "${run%%:*}" && [[ -f $out/${run#*:}/metrics.jsonl ]] && $py -c "import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])][1:]
rates = [r['generated_tokens_per_s'] for r in rows if 'generated_tokens_per_s' in r]
print(sys.argv[2], 'generated tokens/s, median of', len(rates), 'steps:', round(statistics.median(rates)) if rates else '-')" \
        "$out/${run#*:}/metrics.jsonl" "${run%%:*}"
done
step grpo_nccl 120 $py -m torch.distributed.run --standalone --nproc_per_node 1 -m distrl train "${grpo[@]}" \
    --run-dir "$out/grpo_nccl" --overwrite
step grpo_export 60 $py -m distrl export --checkpoint "$out/grpo" --format transformers --out "$out/grpo_hf"

# Recurrent PPO on the GPU, then its checkpoint evaluated and exported with the state as inputs.
step lstm_cuda 120 $py -m distrl train --config configs/cartpole_positions_lstm_ppo.yaml --device cuda \
    --total-steps 8192 --run-dir "$out/lstm" --overwrite log.progress=false
step lstm_eval 60 $py -m distrl eval --checkpoint "$out/lstm" --episodes 3
step lstm_onnx 60 $py -m distrl export --checkpoint "$out/lstm" --format onnx --out "$out/lstm.onnx"
step atari_lstm_cuda 120 $py -m distrl train --config configs/atari_pong_lstm_ppo.yaml --device cuda \
    --total-steps 4096 --run-dir "$out/atari_lstm" --overwrite log.progress=false train.mixed_precision=bf16

step grpo_memory_bench 240 $py benchmarks/grpo_memory_bench.py --config configs/grpo_small.yaml --device cuda \
    --repeats 3 --steps 5
selected grpo_memory_bench && cat "$out/grpo_memory_bench.log"
step atari_bench 240 $py benchmarks/atari_bench.py --device cuda --repeats 2 --updates 4
selected atari_bench && cat "$out/atari_bench.log"
