"""`tagrpo eval` end to end as a subprocess: two tiny random models on a 5-question file, JSON
with every sample and its reward, the side-by-side table, and the same questions and seeds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tagrpo.eval import summarize

FIX = Path(__file__).resolve().parent / "fixtures" / "benchmarks"


@pytest.mark.slow
def test_eval_cli_end_to_end(tmp_path):
    from tagrpo.models import save_tiny_model

    a = save_tiny_model(tmp_path / "tiny-a", seed=0)
    b = save_tiny_model(tmp_path / "tiny-b", seed=1)
    out = tmp_path / "eval.json"
    cmd = [sys.executable, "-m", "tagrpo.cli", "eval", "--model", a, "--model", b,
           "--data", str(FIX / "five_questions.jsonl"), "--n", "4", "--k", "1,2,4", "--greedy",
           "--max-new-tokens", "8", "--seed", "3", "--output", str(out), "--quiet", "--no-diversity"]  # diversity: test_diversity.py
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", COLUMNS="200")
    res = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "pass@4" in res.stdout and "tiny-b (Δ)" in res.stdout and "five_questions" in res.stdout

    doc = json.loads(out.read_text())
    assert doc["format"] == "tagrpo-eval/1" and doc["settings"]["n"] == 4 and doc["settings"]["k"] == [1, 2, 4]
    assert [m["name"] for m in doc["models"]] == ["tiny-a", "tiny-b"]
    results = [m["benchmarks"]["five_questions"] for m in doc["models"]]
    for r in results:
        assert r["n_questions"] == 5 and r["n_samples"] == 4
        assert set(r["pass@k"]) == {"1", "2", "4"}
        assert 0.0 <= r["greedy_accuracy"] <= 1.0 and 0.0 <= r["truncation_rate"] <= 1.0
        assert 0 < r["mean_response_length"] <= 8
        assert "diversity" not in r and r["diversity_model"] is None
        for q in r["questions"]:
            assert len(q["samples"]) == 4 and "greedy" in q
            assert all(s["reward"] in (0.0, 1.0) and isinstance(s["text"], str) for s in q["samples"])
        assert summarize(r["questions"], [1, 2, 4])["pass@k"] == r["pass@k"]  # re-scorable from the file
    # same questions, in the same order, for both models; different models give different text
    assert [q["id"] for q in results[0]["questions"]] == [q["id"] for q in results[1]["questions"]]
    texts = [[s["text"] for q in r["questions"] for s in q["samples"]] for r in results]
    assert texts[0] != texts[1]
