"""A local Hugging Face causal LM as the sequence policy (``model.transformer.pretrained``): tiny
randomly initialised GPT-2, Llama and Qwen2 models built in code (``models.local_lm``) with a
character tokenizer, saved to a temporary directory and loaded offline; they pad, cache and train
as distrl's own transformer does, also sharded over ranks."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from distrl.comm.torch_comm import TorchComm
from distrl.config.run import load_config
from distrl.entry import build_training
from distrl.io.shards import full_tensor
from distrl.models.generate import Sampling, generate, left_padded
from distrl.models.local_lm import ARCHITECTURES
from distrl.models.pretrained import PretrainedLM, PretrainedTokenizer
from distrl.tasks.prompts import ALPHABETS
from distrl.tasks.tokenizer import CharTokenizer
from tests.distributed import run_ranks
from tests.helpers import GRPO_REVERSE, distrl

transformers = pytest.importorskip("transformers", reason="the transformers extra is installed by make test")


def local_model(directory: Path, architecture: str) -> Path:
    """A model of ``architecture`` of 2 small layers, random weights, with the reverse task's
    character tokenizer; Qwen2, which ``transformers`` always gives its own byte-level tokenizer
    class, with a byte-level BPE of 300 tokens trained on the task's kind of text."""
    from distrl.models.local_lm import LMShape, bpe_tokenizer, write_local_lm
    from distrl.models.transformers_export import hf_tokenizer

    if architecture == "qwen2":
        rng = random.Random(0)
        tokenizer = bpe_tokenizer([f"rev {n}={str(n)[::-1]}" for n in rng.sample(range(10**6), 2000)], 300)
    else:
        tokenizer = hf_tokenizer(CharTokenizer(ALPHABETS["reverse"]))
    shape = LMShape(width=32, layers=2, heads=4, kv_heads=2, context=32, mlp_width=64)
    write_local_lm(directory, architecture, shape, tokenizer)
    return directory


def loaded(directory: Path) -> tuple[PretrainedLM, PretrainedTokenizer]:
    from distrl.models.pretrained import load_pretrained_model, load_pretrained_tokenizer

    return load_pretrained_model(str(directory)), load_pretrained_tokenizer(str(directory))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A GPT-2 (with dropout, which the policy turns off)."""
    return local_model(tmp_path_factory.mktemp("tiny-gpt2"), "gpt2")


@pytest.fixture(scope="module", params=ARCHITECTURES)
def any_model_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model of each architecture distrl builds locally: GPT-2, Llama and Qwen2 (grouped-query
    attention, rotary positions)."""
    return local_model(tmp_path_factory.mktemp(f"tiny-{request.param}"), request.param)


def test_a_row_does_not_depend_on_its_batch_and_the_shared_cache_changes_nothing(any_model_dir: Path) -> None:
    model, tokenizer = loaded(any_model_dir)
    rows = [tokenizer.encode(text, "test") for text in ("rev 1=", "rev 31415=")]
    tokens, mask = left_padded(rows, tokenizer.pad_id, torch.device("cpu"))
    with torch.no_grad():
        alone, _ = model(torch.tensor([rows[0]]), torch.ones(1, len(rows[0]), dtype=torch.bool))
        batched, _ = model(tokens, mask)
    torch.testing.assert_close(batched[0, -len(rows[0]) :], alone[0], atol=1e-5, rtol=0)
    seeds = [3, 4]
    with torch.no_grad():
        eos, pad = tokenizer.eos_id, tokenizer.pad_id
        cached = generate(model, tokens, mask, 6, eos, pad, Sampling(), seeds, copies=3)
        uncached = generate(model, tokens, mask, 6, eos, pad, Sampling(), seeds, use_cache=False, copies=3)
    assert torch.equal(cached.tokens, uncached.tokens)  # three copies of each prompt from one prefill
    assert tokenizer.decode([*rows[1], tokenizer.eos_id, *rows[0]]) == "rev 31415="


@pytest.mark.parametrize("any_model_dir", ["gpt2", "llama"], indirect=True)  # 300 tokens: few ends
def test_ended_completions_leave_its_cache_and_change_nothing(any_model_dir: Path) -> None:
    from distrl.algos.grpo import token_log_probs
    from distrl.storage.completions import CompletionBatch

    model, tokenizer = loaded(any_model_dir)
    rows = [tokenizer.encode(text, "test") for text in ("rev 1=", "rev 31415=")]
    tokens, mask = left_padded(rows, tokenizer.pad_id, torch.device("cpu"))
    eos, pad, seeds = tokenizer.eos_id, tokenizer.pad_id, [5, 6]
    fed: list[int] = []
    hook = model.register_forward_pre_hook(lambda module, args: fed.append(args[0].shape[0]))
    with torch.no_grad():
        done = generate(model, tokens, mask, 12, eos, pad, Sampling(), seeds, copies=4, keep_log_probs=True)
        hook.remove()
        uncached = generate(model, tokens, mask, 12, eos, pad, Sampling(), seeds, use_cache=False, copies=4)
        batch = CompletionBatch(*done.sequences(), done.mask, torch.zeros(len(done.tokens)))
        log_probs, _ = token_log_probs(model, batch, 1.0, pad)
    assert fed[0] == 2 and min(fed[1:]) < 8  # each prompt fed once; ended completions dropped
    assert torch.equal(done.tokens, uncached.tokens)
    torch.testing.assert_close(done.log_probs, log_probs, atol=1e-5, rtol=0)


def test_the_loss_pass_feeds_a_shared_prompt_once_with_the_same_numbers(any_model_dir: Path) -> None:
    from distrl.algos.grpo import token_log_probs
    from distrl.storage.completions import CompletionBatch

    model, tokenizer = loaded(any_model_dir)
    assert model.repeatable_cache  # GPT-2 caches keys and values only
    rows = [tokenizer.encode(text, "test") for text in ("rev 1=", "rev 31415=")]
    tokens, mask = left_padded(rows, tokenizer.pad_id, torch.device("cpu"))
    done = generate(model, tokens, mask, 4, tokenizer.eos_id, tokenizer.pad_id, Sampling(), [3, 4], copies=2)
    batch = CompletionBatch(*done.sequences(), done.mask, torch.tensor([1.0, -1.0, 0.5, 2.0]))
    results = []
    for parts in ([batch], [batch.rows(torch.tensor([row])) for row in range(len(batch))]):
        model.zero_grad()
        log_probs = torch.cat([token_log_probs(model, part, 1.0, tokenizer.pad_id)[0] for part in parts])
        (log_probs * batch.advantages[:, None]).sum().backward()
        results.append([log_probs.detach(), *(p.grad.clone() for p in model.parameters())])
    for together, alone in zip(*results, strict=True):  # float32 sums in another order: 1.4e-6 seen
        torch.testing.assert_close(together, alone, atol=3e-6, rtol=1e-5)


def test_packed_sequences_give_the_padded_numbers(any_model_dir: Path) -> None:
    """Sequence packing through ``transformers``' own packed-sequence attention (positions that
    restart at 0, no mask): the padded pass's log-probabilities and gradients."""
    from distrl.algos.grpo import token_log_probs
    from distrl.storage.completions import CompletionBatch

    model, tokenizer = loaded(any_model_dir)
    rows = [tokenizer.encode(text, "test") for text in ("rev 1=", "rev 31415=", "rev 27=")]
    tokens, mask = left_padded(rows, tokenizer.pad_id, torch.device("cpu"))
    done = generate(
        model, tokens, mask, 5, tokenizer.eos_id, tokenizer.pad_id, Sampling(), [3, 4, 5], copies=2
    )
    batch = CompletionBatch(*done.sequences(), done.mask, torch.tensor([1.0, -1.0, 0.5, 2.0, -0.5, 0.0]))
    results = []
    for packed_tokens in (None, 24):
        model.zero_grad()
        log_probs, entropy = token_log_probs(model, batch, 1.0, tokenizer.pad_id, packed_tokens=packed_tokens)
        (log_probs * batch.advantages[:, None] + 0.1 * entropy).sum().backward()
        results.append([log_probs.detach(), *(p.grad.clone() for p in model.parameters())])
    for padded, packed in zip(*results, strict=True):
        torch.testing.assert_close(packed, padded, atol=1e-5, rtol=1e-4)


@pytest.mark.slow
def test_grpo_trains_it_and_it_evaluates_and_exports(model_dir: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    trained = distrl(
        "train", "--config", str(GRPO_REVERSE), "--run-dir", str(run),
        f"model.transformer.pretrained={model_dir}", "train.total_steps=512", "train.stop_return=null",
        "log.progress=false", "train.activation_checkpointing=true",
    )  # fmt: skip
    assert trained.returncode == 0, trained.stderr[-3000:]
    evaluated = distrl("eval", "--checkpoint", str(run), "--episodes", "8", "--json")
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    exported = tmp_path / "exported"
    written = distrl("export", "--checkpoint", str(run), "--format", "transformers", "--out", str(exported))
    assert written.returncode == 0, written.stderr[-3000:]
    # The export holds the trained weights, not the starting ones.
    start = transformers.AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True)
    end = transformers.AutoModelForCausalLM.from_pretrained(exported, local_files_only=True)
    moved = [not torch.equal(a, b) for a, b in zip(start.parameters(), end.parameters(), strict=True)]
    assert any(moved)


@pytest.mark.slow
def test_bad_directories_are_one_line(model_dir: Path, tmp_path: Path) -> None:
    missing = distrl(
        "train", "--config", str(GRPO_REVERSE), f"model.transformer.pretrained={tmp_path / 'none'}"
    )
    assert missing.returncode == 2
    assert missing.stderr.strip().endswith("not a directory; give one written by save_pretrained")
    no_pad = tmp_path / "no-pad"
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    tokenizer.pad_token = tokenizer.eos_token
    tokenizer.save_pretrained(no_pad)
    refused = distrl("train", "--config", str(GRPO_REVERSE), f"model.transformer.pretrained={no_pad}")
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert "needs an end token and a padding token apart from it" in refused.stderr


def _grpo_rank(comm: TorchComm, overrides: list[str], run_dir: Path, out: Path) -> None:
    loop = build_training(load_config(GRPO_REVERSE, overrides), comm, torch.device("cpu"), run_dir)
    loop.run()
    weights = torch.cat([full_tensor(p.detach()).reshape(-1) for p in loop.runner.policy.parameters()])
    if comm.is_main:
        torch.save(weights, out)  # a test's own scratch file, read back below


@pytest.mark.parametrize("any_model_dir", ["llama", "qwen2"], indirect=True)
def test_sharded_grpo_trains_llama_and_qwen2_as_one_rank_does(any_model_dir: Path, tmp_path: Path) -> None:
    overrides = [
        f"model.transformer.pretrained={any_model_dir}", "algo.num_prompts_per_step=5",
        "algo.num_generations_per_prompt=3", "algo.max_new_tokens=6", "train.total_steps=45",
        "log.progress=false", "log.tensorboard=false", "train.stop_return=null", "eval.every=1000",
        "train.mixed_precision=fp32",  # auto would pick bf16 on a CPU with bf16 units
    ]  # fmt: skip
    # The one-rank reference in this process: a lone rank's comm is the no-op TorchComm anyway.
    _grpo_rank(TorchComm(), overrides, tmp_path / "one", tmp_path / "one.pt")
    run_ranks(_grpo_rank, 2, [*overrides, "train.sharding=fsdp"], tmp_path / "two", tmp_path / "two.pt")
    start = torch.cat([p.reshape(-1) for p in loaded(any_model_dir)[0].parameters()]).detach()
    one, two = torch.load(tmp_path / "one.pt"), torch.load(tmp_path / "two.pt")
    assert float((one - start).abs().max()) > 1e-4  # three updates moved the weights
    torch.testing.assert_close(two, one, atol=1e-6, rtol=0)
