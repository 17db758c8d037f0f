"""Prompts by global index: deterministic, a held-out share training never sees, a curriculum,
and prompt files."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from distrl.algos.grpo_config import TaskConfig
from distrl.errors import UserError
from distrl.tasks.prompts import PromptSource, held_out, task_tokenizer


def test_generated_prompts_are_fixed_by_index_and_answered_correctly() -> None:
    task = TaskConfig(name="add", min_length=1, max_length=3)
    source = PromptSource(task, seed=7, held_out_side=False)
    assert source.example(5) == PromptSource(task, seed=7, held_out_side=False).example(5)
    for index in range(50):
        example = source.example(index)
        a, b = example.prompt.rstrip("=").split("+")
        assert int(example.answer) == int(a) + int(b) and max(len(a), len(b)) <= 3
    reverse = PromptSource(TaskConfig(name="reverse"), 1, False).example(0)
    assert reverse.prompt == f"rev {reverse.answer[::-1]}="
    sort = PromptSource(TaskConfig(name="sort"), 1, False).example(0)
    assert sort.answer == "".join(sorted(sort.prompt[5:-1]))
    for index in range(50):
        count = PromptSource(TaskConfig(name="count"), 1, False).example(index)
        digit, digits = count.prompt.removeprefix("cnt ").rstrip("=").split(" ")
        assert count.answer == str(digits.count(digit)) and len(digit) == 1 and digits.isdigit()
        increment = PromptSource(TaskConfig(name="increment"), 1, False).example(index)
        digits = increment.prompt.removeprefix("inc ").rstrip("=")
        assert increment.answer == "".join("1234567890"[int(d)] for d in digits)
        largest = PromptSource(TaskConfig(name="max"), 1, False).example(index)
        assert largest.answer == max(largest.prompt.removeprefix("max ").rstrip("="))


def test_training_never_sees_a_held_out_prompt() -> None:
    task = TaskConfig(name="add", max_length=2, held_out_fraction=0.2)
    training = {PromptSource(task, 1, False).example(i).prompt for i in range(3000)}
    evaluation = {PromptSource(task, 1, True).example(i).prompt for i in range(300)}
    assert training and evaluation and not training & evaluation
    assert 0.1 < len(evaluation) / (len(evaluation) + 300) < 0.9  # the held-out draws vary


def test_the_curriculum_grows_the_longest_length() -> None:
    task = TaskConfig(name="reverse", min_length=2, max_length=8, curriculum_fraction=0.5)
    source = PromptSource(task, 1, False)
    assert [source.longest_length(p) for p in (0.0, 0.25, 0.5, 0.9)] == [2, 5, 8, 8]
    early = {len(source.example(i, progress=0.0).answer) for i in range(100)}
    assert early == {2}
    # Held-out prompts are all at the full length, from the start.
    assert {len(PromptSource(task, 1, True).example(i, progress=0.0).answer) for i in range(50)} == {8}


def test_prompt_files_in_jsonl_and_parquet(tmp_path: Path) -> None:
    rows = [{"prompt": f"{i}+{i}=", "answer": str(2 * i)} for i in range(40)]
    jsonl = tmp_path / "prompts.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in rows))
    parquet = tmp_path / "prompts.parquet"
    pq.write_table(pa.Table.from_pylist(rows), parquet)
    for path in (jsonl, parquet):
        task = TaskConfig(prompts=str(path), held_out_fraction=0.25)
        source = PromptSource(task, 1, False)
        epoch = [source.example(i) for i in range(len(source.rows))]
        assert sorted(e.prompt for e in epoch) == sorted(r.prompt for r in source.rows)  # each once per epoch
        assert not any(held_out(e, 0.25) for e in epoch)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "1+1="}\n')
    with pytest.raises(UserError, match=r"bad.jsonl row 1: needs string fields prompt and answer"):
        PromptSource(TaskConfig(prompts=str(bad)), 1, False)


def test_the_tokenizer_round_trips_and_names_unknown_characters() -> None:
    tokenizer = task_tokenizer(TaskConfig(name="add"))
    assert tokenizer.vocab_size == 2 + len("0123456789+=")
    ids = tokenizer.encode("12+34=", "test")
    assert tokenizer.decode([*ids, tokenizer.eos_id, *ids]) == "12+34="
    with pytest.raises(
        UserError, match=r"^here: 'a\+b' has characters outside the tokenizer's alphabet \('ab'\)"
    ):
        tokenizer.encode("a+b", "here")


def test_a_prompts_file_replaces_the_generator_and_says_so(tmp_path: Path) -> None:
    """``distrl config`` and the run's config.yaml show no generator when a file gives the prompts."""
    assert TaskConfig(prompts=str(tmp_path / "p.jsonl")).name is None
    assert TaskConfig(name="sort", prompts=str(tmp_path / "p.jsonl")).name is None
    assert TaskConfig().name == "reverse"
    with pytest.raises(ValueError, match="name is null and no task.prompts is given"):
        TaskConfig(name=None)
