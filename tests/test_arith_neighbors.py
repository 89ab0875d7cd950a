"""`neighbors: generator` in the trainer and `tagrpo neighbors --backend generator`: neighbors are
the arithmetic generator's training forms of each row, and rows without the generator's
structure are refused with an error naming the row."""

from __future__ import annotations

import json

import pytest
from train_helpers import ROWS, tiny_cfg
from typer.testing import CliRunner

from tagrpo.cli import app
from tagrpo.data.arith import generate_problems
from tagrpo.data.arith_forms import NEIGHBOR_FORMS, generator_neighbors, render
from tagrpo.data.io import read_rows, write_rows
from tagrpo.errors import TagrpoError
from tagrpo.train.config import load_config


def run(*args):
    return CliRunner().invoke(app, ["neighbors", *map(str, args)])


# --- config -----------------------------------------------------------------------------------
def test_generator_is_a_neighbor_source_and_bad_sources_list_the_choices():
    assert load_config(None, ["neighbors=generator"]).neighbors == "generator"
    with pytest.raises(TagrpoError, match="'neighbors': 'llm' is not valid; choose one of auto, column, rules, generator"):
        load_config(None, ["neighbors=llm"])


def test_generator_caps_num_neighbors_at_its_number_of_forms():
    n = len(NEIGHBOR_FORMS)
    assert load_config(None, ["neighbors=generator", f"num_neighbors={n}", "generate_batch_size=64"]).num_neighbors == n
    with pytest.raises(TagrpoError, match=f"'num_neighbors': neighbors: generator has {n} training forms.*renamed"):
        load_config(None, ["neighbors=generator", f"num_neighbors={n + 1}", "generate_batch_size=64"])
    # plain GRPO ignores the neighbor source
    load_config(None, ["neighbors=generator", "algorithm=grpo", f"num_neighbors={n + 1}", "generate_batch_size=64"])


# --- trainer ----------------------------------------------------------------------------------
def _trainer(tmp_path, *ov, rows=None):
    from tagrpo.train.trainer import Trainer

    t = Trainer(tiny_cfg(tmp_path, "neighbors=generator", "train_data=arith", "arith_size=4", "arith_difficulty=1", *ov), rows=rows)
    t.setup()
    return t


def test_trainer_samples_generator_neighbors(tmp_path):
    t = _trainer(tmp_path, "algorithm=ta-grpo", "seed=3")
    src = {r["id"]: r for r in generate_problems(4, 1, seed=3)}
    assert len(t.data) == 4
    for fam in t.data:
        r = src[fam["id"]]
        assert fam["question"] == r["question"]
        assert fam["neighbors"] == generator_neighbors(r["structure"], 2, r["id"], seed=3)
    fams = t.families_for_step(0)
    samples, _, _ = t.rollout(0, fams)
    for f, fam in fams:
        got = {tuple(s.gen_prompt_ids) for s in samples if s.family == f}
        assert got == {tuple(p) for p in fam["prompts"]} and len(got) == 3
        assert all(s.anchor_prompt_ids == fam["prompts"][0] for s in samples if s.family == f)


def test_trainer_refuses_rows_without_structure_naming_the_row(tmp_path):
    rows = [{**r, "structure": generate_problems(1, 1, seed=i)[0]["structure"]} for i, r in enumerate(ROWS[:1])]
    with pytest.raises(TagrpoError, match=r"rows row 1 \(id 0\): neighbors: generator: the structure evaluates to"):
        _trainer(tmp_path, "algorithm=ta-grpo", rows=rows)
    with pytest.raises(TagrpoError, match=r"rows row 2 \(id 1\): neighbors: generator: no `structure` field.*neighbors: rules"):
        _trainer(tmp_path, "algorithm=ta-grpo", rows=generate_problems(1, 1) + [dict(ROWS[1])])


# --- command line -----------------------------------------------------------------------------
@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_cli_generator_backend_writes_answer_preserving_neighbors(tmp_path, suffix):
    src = generate_problems(12, 2, seed=4)
    write_rows(tmp_path / f"in{suffix}", src)
    r = run("--input", tmp_path / f"in{suffix}", "--output", tmp_path / f"out{suffix}", "--n", "3", "--backend", "generator",
            "--seed", "5", "--no-progress")
    assert r.exit_code == 0, r.output
    out = read_rows(tmp_path / f"out{suffix}")
    assert [x["question"] for x in out] == [x["question"] for x in src]
    for row, s in zip(out, src):
        assert row["structure"] == s["structure"]
        assert row["neighbors"] == generator_neighbors(s["structure"], 3, s["id"], seed=5)
        assert set(row["neighbor_forms"]) <= set(NEIGHBOR_FORMS)
        for form, text in zip(row["neighbor_forms"], row["neighbors"]):
            assert form == "renamed" or text == render(s["structure"], form)
    assert "rows with 3 neighbors" in r.output and "wrote 12 rows" in r.output


def test_cli_generator_transformations_subset(tmp_path):
    write_rows(tmp_path / "in.jsonl", generate_problems(10, 1, seed=0))
    r = run("--input", tmp_path / "in.jsonl", "--output", tmp_path / "o.jsonl", "--n", "2", "--backend", "generator",
            "--transformations", "given_find,number_words", "--no-progress")
    assert r.exit_code == 0, r.output
    assert all(sorted(x["neighbor_forms"]) == ["given_find", "number_words"] for x in read_rows(tmp_path / "o.jsonl"))
    r = run("--input", tmp_path / "in.jsonl", "--output", tmp_path / "o.jsonl", "--backend", "generator",
            "--transformations", "reorder", "--no-progress")
    assert r.exit_code == 2 and "choose from renamed, question_first" in r.output


def test_cli_generator_refuses_rows_without_structure_naming_the_row(tmp_path):
    rows = generate_problems(2, 1, seed=0) + [{"id": "gsm-7", "question": "Tom has 3 apples. How many?", "answer": "3"}]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))
    r = run("--input", tmp_path / "in.jsonl", "--output", tmp_path / "o.jsonl", "--backend", "generator", "--no-progress")
    assert r.exit_code == 2
    assert "row 3 (id 'gsm-7'): --backend generator: no `structure` field" in r.output
    assert "--backend rules" in r.output and not (tmp_path / "o.jsonl").exists()
    r = run("--input", tmp_path / "in.jsonl", "--output", tmp_path / "o.jsonl", "--backend", "generator", "--n", "9")
    assert r.exit_code == 2 and "--n 9" in r.output
    r = run("--input", tmp_path / "in.jsonl", "--output", tmp_path / "o.jsonl", "--backend", "generator", "--verify-solve")
    assert r.exit_code == 2 and "--verify-solve needs a model" in r.output
