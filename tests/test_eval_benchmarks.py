"""Benchmark registry: loaders on local fixtures in each benchmark's real field layout, the hub
path (with a stand-in loader), GPQA's seeded option shuffle and letter scoring."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

import pytest

from tagrpo.errors import TagrpoError
from tagrpo.eval.benchmarks import (
    BENCHMARKS,
    CHOICE_TEMPLATE,
    LETTERS,
    choice_letter,
    choice_reward,
    gpqa_options,
    load_benchmark,
    load_eval_data,
    scorer_for,
)

FIX = Path(__file__).resolve().parent / "fixtures" / "benchmarks"

# name -> (number of fixture rows, first row's id, first row's gold answer after normalization)
EXPECTED = {
    "gsm8k": (3, 0, None),  # GSM8K keeps the full solution; the reward reads the '####' tail
    "math500": (3, "test/prealgebra/9001.json", "\\frac{7}{8}"),
    "aime24": (2, 60, "1"),
    "aime25": (2, "0", "28"),
    "amc23": (3, 0, "210"),
    "olympiadbench": (3, 2701, "9"),
    "minerva": (2, 0, "60"),
    "gpqa-diamond": (3, "recA1b2c3", None),
}


def test_registry_covers_the_paper_benchmarks():
    assert set(BENCHMARKS) == set(EXPECTED) | {"amc12"}  # amc12: tests/test_eval_amc12.py (fixtures in tmp_path)
    for b in BENCHMARKS.values():
        assert b.hf_id.count("/") == 1 and b.split and b.question_field and b.answer_field


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_loader_on_fixture(name):
    rows = load_benchmark(name, FIX, seed=0)
    count, first_id, first_answer = EXPECTED[name]
    assert len(rows) == count
    assert rows[0]["id"] == first_id
    assert all(r["benchmark"] == name and r["question"].strip() and r["answer"] for r in rows)
    assert all(r["kind"] == ("choice" if name == "gpqa-diamond" else "math") for r in rows)
    if first_answer is not None:
        assert rows[0]["answer"] == first_answer
    assert len(load_benchmark(name, FIX, limit=1)) == 1


@pytest.mark.parametrize("name", sorted(n for n in EXPECTED if n != "gpqa-diamond"))
def test_gold_answers_reach_the_reward(name):
    """The layout's answer field is what math_reward compares to: a completion boxing the gold
    value scores 1, a wrong value 0 (GSM8K's '#### N' and float AMC answers included)."""
    from tagrpo.rewards import math_reward, normalize_gold

    for r in load_benchmark(name, FIX):
        gold = normalize_gold(r["answer"])
        assert math_reward(f"So the result is \\boxed{{{gold}}}.", r["answer"]) == 1.0, (name, r)
        assert math_reward("So the result is \\boxed{123456789}.", r["answer"]) == 0.0


def test_field_details():
    gsm = load_benchmark("gsm8k", FIX)
    assert gsm[1]["answer"].endswith("#### 875")
    amc = load_benchmark("amc23", FIX)
    assert [r["answer"] for r in amc] == ["210", "28", "1.5"]  # floats from the hub, integral ones as ints
    olymp = load_benchmark("olympiadbench", FIX)
    assert olymp[1]["answer"] == "$3$, $-3$"
    assert olymp[2]["question"].startswith("Let $T=4$.\n")  # context goes before the question
    assert olymp[0]["question"].startswith("Compute the number")


def _gpqa_records():
    with open(FIX / "gpqa_diamond.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_gpqa_options_seeded_shuffle():
    recs = _gpqa_records()
    rows = load_benchmark("gpqa-diamond", FIX, seed=0)
    assert rows == load_benchmark("gpqa-diamond", FIX, seed=0)  # same seed, same letters
    for rec, row in zip(recs, rows):
        letter = row["answer"]
        assert letter in LETTERS
        # the option printed under the gold letter is the dataset's correct answer
        line = next(ln for ln in row["question"].splitlines() if ln.startswith(f"{letter}) "))
        assert line == f"{letter}) {rec['Correct Answer']}"
        assert sorted(row["choices"]) == sorted(rec[f] for f in ("Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3"))
        assert row["question"].startswith(rec["Question"] + "\n\nA) ")
    # over many seeds the correct option lands on every letter, roughly uniformly
    letters = Counter(gpqa_options(recs[0], s, "recA1b2c3")[1] for s in range(400))
    assert set(letters) == set(LETTERS) and min(letters.values()) > 60
    # the shuffle depends on the seed and on the question
    assert len({tuple(gpqa_options(recs[0], s, "x")[0]) for s in range(10)}) > 1
    assert gpqa_options(recs[0], 3, "x") == gpqa_options(recs[0], 3, "x")


def test_gpqa_letter_scoring():
    rows = load_benchmark("gpqa-diamond", FIX, seed=7)
    gold = rows[0]["answer"]
    wrong = next(x for x in LETTERS if x != gold)
    for text in (f"\\boxed{{{gold}}}", f"... so \\boxed{{({gold})}}", f"\\boxed{{\\text{{{gold}}}}}",
                 f"\\boxed{{{gold}) {rows[0]['choices'][LETTERS.index(gold)]}}}", f"The final answer is ({gold}).",
                 f"\\boxed{{{gold.lower()}}}"):
        assert choice_reward(text, gold) == 1.0, text
    for text in (f"\\boxed{{{wrong}}}", "no answer at all", "\\boxed{42}", "\\boxed{Both A and B}", "\\boxed{a pair}", ""):
        assert choice_reward(text, gold) == 0.0, text
    assert choice_letter("I think \\boxed{B} ... no wait, \\boxed{D}") == "D"  # the last box counts
    assert choice_letter("\\boxed{a pair}") is None and choice_letter("\\boxed{(b)}") == "B"
    assert scorer_for("choice") is choice_reward
    assert "letter of the correct option" in CHOICE_TEMPLATE


def test_hub_path_and_offline_message():
    calls = []

    def fake_loader(hf_id, config, split):
        calls.append((hf_id, config, split))
        return [{"question": "What is 1+1?", "final_answer": ["2"], "id": 5, "context": None}]

    rows = load_benchmark("olympiadbench", None, hub_loader=fake_loader)
    assert calls == [("Hothan/OlympiadBench", "OE_TO_maths_en_COMP", "train")]
    assert rows[0]["answer"] == "2" and rows[0]["id"] == 5

    def offline(*a, **k):
        raise ConnectionError("no network")

    with pytest.raises(TagrpoError, match="--data-dir"):
        load_benchmark("math500", None, hub_loader=offline)
    with pytest.raises(TagrpoError, match="math500"):  # an empty --data-dir falls back to the hub
        load_benchmark("math500", FIX / "nowhere", hub_loader=offline)


def test_bad_layout_names_file_record_and_field(tmp_path):
    (tmp_path / "math500.jsonl").write_text(json.dumps({"question": "wrong field", "answer": "1"}) + "\n")
    with pytest.raises(TagrpoError, match=r"math500\.jsonl, record 1: field 'problem'"):
        load_benchmark("math500", tmp_path)


def test_load_eval_data_file_or_name(tmp_path):
    label, rows = load_eval_data(str(FIX / "five_questions.jsonl"))
    assert label == "five_questions" and len(rows) == 5 and rows[0]["kind"] == "math"
    label, rows = load_eval_data("AMC23", FIX)
    assert label == "amc23" and len(rows) == 3
    # a GPQA-layout file given directly is recognized by its fields
    label, rows = load_eval_data(str(FIX / "gpqa_diamond.csv"), limit=2)
    assert len(rows) == 2 and rows[0]["kind"] == "choice"
    # parquet in a benchmark's layout
    import pyarrow as pa
    import pyarrow.parquet as pq

    recs = [json.loads(x) for x in (FIX / "aime25.jsonl").read_text().splitlines()]
    pq.write_table(pa.Table.from_pylist(recs), tmp_path / "aime25.parquet")
    assert [r["answer"] for r in load_benchmark("aime25", tmp_path)] == ["28", "64"]
    with pytest.raises(TagrpoError, match="neither a file nor a benchmark.*gsm8k.*gpqa-diamond"):
        load_eval_data("gsm8kk")
    with pytest.raises(FileNotFoundError):
        load_eval_data(str(tmp_path / "missing.jsonl"))
