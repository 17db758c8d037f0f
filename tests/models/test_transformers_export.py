"""A sequence policy written out as a transformers GPT-2 model gives the same logits (1e-5) and
tokens, loaded offline by transformers itself; ``distrl export`` and ``output.path`` write it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from distrl.algos.grpo_config import TransformerConfig
from distrl.models.sequence_policy import SequencePolicy
from distrl.models.transformer import TransformerLM
from distrl.tasks.tokenizer import CharTokenizer
from tests.helpers import REPO, distrl

transformers = pytest.importorskip("transformers", reason="the transformers extra is installed by make test")


def test_the_written_model_gives_distrls_logits_and_tokens(tmp_path: Path) -> None:
    from distrl.models.transformers_export import save_as_transformers

    torch.manual_seed(0)
    tokenizer = CharTokenizer("0123456789rev =")
    model = TransformerLM(tokenizer.vocab_size, TransformerConfig(layers=2, width=32, heads=4, context=24))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))  # away from the initial zeros and ones
    save_as_transformers(SequencePolicy(model, tokenizer, max_new_tokens=8), tmp_path / "hf")

    hf_model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf", local_files_only=True)
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf", local_files_only=True)
    text = "rev 31415="
    ids = hf_tokenizer(text, return_tensors="pt")["input_ids"]
    assert ids[0].tolist() == tokenizer.encode(text, "test")
    assert hf_tokenizer.decode([*ids[0].tolist(), tokenizer.eos_id]) == text + "<eos>"
    with torch.no_grad():
        expected, _ = model(ids, torch.ones_like(ids, dtype=torch.bool))
        got = hf_model(input_ids=ids).logits
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    # Greedy continuations agree too.
    completion = SequencePolicy(model, tokenizer, 8).complete([text])[0][0]
    generated = hf_model.generate(ids, max_new_tokens=8, do_sample=False, eos_token_id=tokenizer.eos_id)
    assert hf_tokenizer.decode(generated[0, ids.shape[1] :], skip_special_tokens=True) == completion


@pytest.mark.slow
def test_the_command_line_writes_a_grpo_checkpoint_and_refuses_the_wrong_format(tmp_path: Path) -> None:
    run, final = tmp_path / "run", tmp_path / "final"
    trained = distrl(
        "train", "--config", str(REPO / "configs" / "grpo_reverse.yaml"), "--run-dir", str(run),
        "train.total_steps=256", "train.stop_return=null", "log.progress=false", f"output.path={final}",
    )  # fmt: skip
    assert trained.returncode == 0, trained.stderr
    hf_dir = tmp_path / "hf"
    written = distrl("export", "--checkpoint", str(run), "--format", "transformers", "--out", str(hf_dir))
    assert written.returncode == 0, written.stderr
    for directory in (hf_dir, final):  # distrl export's and output.path's at the end of training
        assert (directory / "model.safetensors").is_file() and (directory / "tokenizer.json").is_file()
    wrong = distrl("export", "--checkpoint", str(run), "--format", "onnx", "--out", str(tmp_path / "p.onnx"))
    assert wrong.returncode == 2 and "is written with --format transformers" in wrong.stderr
