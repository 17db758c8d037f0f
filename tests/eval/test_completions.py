"""What ``distrl eval`` of a sequence policy names: the task, and for a prompts file how many
distinct held-out prompts it has (a file with fewer than the episodes asked for repeats some)."""

from __future__ import annotations

import json
from pathlib import Path

from distrl.config.run import load_config
from distrl.eval.completions import task_name
from distrl.tasks.prompts import Example, held_out


def test_a_prompts_file_is_named_with_its_distinct_held_out_prompts(tmp_path: Path) -> None:
    rows = [{"prompt": f"{i}+{i}=", "answer": str(2 * i)} for i in range(40)]
    path = tmp_path / "prompts.jsonl"
    path.write_text("\n".join(json.dumps(row) for row in rows))
    kept = sum(held_out(Example(row["prompt"], row["answer"]), 0.25) for row in rows)
    assert 0 < kept < 40
    cfg = load_config(None, ["algo.name=grpo", f"task.prompts={path}", "task.held_out_fraction=0.25"])
    assert task_name(cfg) == f"task {path} ({kept} distinct held-out prompts)"
    assert task_name(load_config(None, ["algo.name=grpo"])) == "task reverse"
