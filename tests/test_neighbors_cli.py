"""`tagrpo neighbors` end to end: the rules run over GSM8K dev (the issue's "done means"), input
errors naming file/line/field, rows without question/answer reported and skipped, parquet
output, and option errors naming the valid choices."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tagrpo.cli import app
from tagrpo.data import read_rows
from tagrpo.neighbors import validate_neighbor
from tagrpo.neighbors.text import normalize_text
from tagrpo.rewards import normalize_gold

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
REPO = Path(__file__).resolve().parents[1]


def run(*args):
    return CliRunner().invoke(app, ["neighbors", *map(str, args)])


@pytest.mark.slow
def test_rules_on_gsm8k_dev_end_to_end(tmp_path):
    out = tmp_path / "n.jsonl"
    p = subprocess.run(
        [sys.executable, "-m", "tagrpo.cli", "neighbors", "--input", str(DATA / "gsm8k_dev.jsonl"), "--output", str(out),
         "--n", "3", "--backend", "rules", "--no-progress"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert p.returncode == 0, p.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    src = read_rows(DATA / "gsm8k_dev.jsonl")
    assert len(rows) == len(src) == 500
    full = sum(len(r["neighbors"]) == 3 for r in rows)
    assert full >= 490, full
    for r, s in zip(rows, src):
        assert r["question"] == s["question"] and r["answer"] == s["answer"]
        norms = {normalize_text(x) for x in r["neighbors"]}
        assert len(norms) == len(r["neighbors"]) and normalize_text(r["question"]) not in norms
        for nb in r["neighbors"]:
            assert validate_neighbor(r["question"], nb, normalize_gold(r["answer"])).ok
    assert "rows with 3 neighbors" in p.stdout and f"wrote 500 rows to {out}" in p.stdout


def test_bad_json_line_is_an_error_naming_file_and_line(tmp_path):
    inp = tmp_path / "in.jsonl"
    inp.write_text('{"question": "Tom has 3 apples. How many?", "answer": "#### 3"}\n\n{"question": "x", answer: 1}\n')
    r = run("--input", inp, "--output", tmp_path / "o.jsonl")
    assert r.exit_code == 2
    assert f"{inp}, line 3: invalid JSON" in r.output
    assert not (tmp_path / "o.jsonl").exists()


def test_rows_without_question_or_answer_are_reported_and_skipped(tmp_path):
    inp = tmp_path / "in.jsonl"
    rows = [
        {"question": "Tom has 3 apples. Mary gives him 4 more. How many apples does Tom have?", "answer": "#### 7"},
        {"question": "No answer here. How many?"},
        {"answer": "#### 2"},
        {"problem": "Let $x = 2$. What is $x + 3$?", "solution": "$\\boxed{5}$"},
    ]
    inp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "o.parquet"
    r = run("--input", inp, "--output", out, "--n", "2", "--no-progress")
    assert r.exit_code == 0, r.output
    assert f"{inp}, line 2: no answer" in r.output and f"{inp}, line 3: no question" in r.output
    got = read_rows(out)
    assert [g["id"] for g in got] == [0, 3]
    assert all(len(g["neighbors"]) == 2 for g in got)
    assert "rows skipped" in r.output


def test_short_rows_are_warned(tmp_path):
    inp = tmp_path / "in.jsonl"
    inp.write_text(json.dumps({"question": "What is 2 + 3?", "answer": "5"}) + "\n")
    r = run("--input", inp, "--output", tmp_path / "o.jsonl", "--n", "3", "--transformations", "reorder,format", "--no-progress")
    assert r.exit_code == 0, r.output
    assert "1 rows have fewer than 3 neighbors" in r.output
    assert json.loads((tmp_path / "o.jsonl").read_text())["neighbors"] == []


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--transformations", "paraphrase"], "choose from reorder, format, rename, instruct"),
        (["--backend", "rules", "--verify-solve"], "--verify-solve needs a model"),
        (["--backend", "openai"], "--model is required with --backend openai"),
        (["--backend", "openai", "--model", "m", "--transformations", "instruct"], "choose from paraphrase, rename, format"),
        (["--output", "OUT.csv"], "use one of .jsonl, .json, .parquet"),
        (["--max-length-ratio", "0.9"], "length ratios"),
    ],
)
def test_option_errors_name_the_choices(tmp_path, extra, message):
    inp = tmp_path / "in.jsonl"
    inp.write_text(json.dumps({"question": "Tom has 3 apples. How many?", "answer": "3"}) + "\n")
    extra = [str(tmp_path / a) if a == "OUT.csv" else a for a in extra]
    output = [] if "--output" in extra else ["--output", tmp_path / "o.jsonl"]
    r = run("--input", inp, *output, *extra)
    assert r.exit_code == 2, r.output
    assert message in r.output


def test_unknown_backend_is_refused_with_choices(tmp_path):
    r = run("--input", tmp_path / "x.jsonl", "--output", tmp_path / "o.jsonl", "--backend", "gpt")
    assert r.exit_code == 2
    assert "rules" in r.output and "openai" in r.output and "hf" in r.output


def test_help_lists_the_options():
    r = CliRunner().invoke(app, ["neighbors", "--help"])
    assert r.exit_code == 0
    for opt in ("--backend", "--base-url", "--api-key-env", "--concurrency", "--max-requests", "--store", "--verify-solve"):
        assert opt in r.output
