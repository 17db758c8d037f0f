"""A local Hugging Face causal LM as the sequence policy (``model.transformer.pretrained``): a
tiny randomly initialised GPT-2 and a character tokenizer saved to a temporary directory, loaded
offline; it pads, caches and trains as distrl's own transformer does."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from distrl.models.generate import Sampling, generate, left_padded
from distrl.tasks.prompts import ALPHABETS
from distrl.tasks.tokenizer import CharTokenizer
from tests.helpers import GRPO_REVERSE, distrl

transformers = pytest.importorskip("transformers", reason="the transformers extra is installed by make test")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A GPT-2 of 2 small layers with dropout (the policy turns it off), random weights."""
    from distrl.models.transformers_export import hf_tokenizer

    directory = tmp_path_factory.mktemp("tiny-gpt2")
    tokenizer = CharTokenizer(ALPHABETS["reverse"])
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=tokenizer.vocab_size, n_positions=32, n_embd=32, n_layer=2, n_head=4,
        eos_token_id=tokenizer.eos_id, pad_token_id=tokenizer.pad_id,
    )  # fmt: skip
    transformers.GPT2LMHeadModel(config).save_pretrained(directory)
    hf_tokenizer(tokenizer).save_pretrained(directory)
    return directory


def test_a_row_does_not_depend_on_its_batch_and_the_shared_cache_changes_nothing(model_dir: Path) -> None:
    from distrl.models.pretrained import load_pretrained_model, load_pretrained_tokenizer

    model, tokenizer = load_pretrained_model(str(model_dir)), load_pretrained_tokenizer(str(model_dir))
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


def test_ended_completions_leave_its_cache_and_change_nothing(model_dir: Path) -> None:
    from distrl.algos.grpo import token_log_probs
    from distrl.models.pretrained import load_pretrained_model, load_pretrained_tokenizer
    from distrl.storage.completions import CompletionBatch

    model, tokenizer = load_pretrained_model(str(model_dir)), load_pretrained_tokenizer(str(model_dir))
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


def test_the_loss_pass_feeds_a_shared_prompt_once_with_the_same_numbers(model_dir: Path) -> None:
    from distrl.algos.grpo import token_log_probs
    from distrl.models.pretrained import load_pretrained_model, load_pretrained_tokenizer
    from distrl.storage.completions import CompletionBatch

    model, tokenizer = load_pretrained_model(str(model_dir)), load_pretrained_tokenizer(str(model_dir))
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
    for together, alone in zip(*results, strict=True):
        torch.testing.assert_close(together, alone, atol=1e-6, rtol=1e-5)


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
