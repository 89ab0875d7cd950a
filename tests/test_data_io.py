"""tagrpo.data.io: reading GSM8K / MATH / explicit fields from .jsonl, .json, .parquet; errors
that name file, line and field; atomic writes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tagrpo.data import SkippedRow, read_rows, write_rows
from tagrpo.errors import TagrpoError
from tagrpo.rewards import normalize_gold

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def _jsonl(path: Path, rows) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def test_gsm8k_rows_keep_full_answer_and_get_ids():
    rows = read_rows(DATA / "gsm8k_dev.jsonl")
    assert len(rows) == 500
    first = json.loads((DATA / "gsm8k_dev.jsonl").read_text().splitlines()[0])
    assert rows[0]["question"] == first["question"]
    assert rows[0]["answer"] == first["answer"]  # full text, gold extraction is normalize_gold's job
    assert normalize_gold(rows[0]["answer"]) == "7"
    assert [r["id"] for r in rows] == list(range(500))
    assert "neighbors" not in rows[0]


def test_math_fields_prefer_answer_then_solution(tmp_path):
    p = _jsonl(tmp_path / "math.jsonl", [
        {"problem": "What is $1+1$?", "solution": "It is $\\boxed{2}$.", "unique_id": "test/1.json"},
        {"problem": "What is $2+2$?", "solution": "So $\\boxed{4}$.", "answer": "4", "level": "Level 1"},
    ])
    rows = read_rows(p)
    assert rows[0]["question"] == "What is $1+1$?" and rows[0]["answer"] == "It is $\\boxed{2}$."
    assert rows[0]["id"] == "test/1.json"
    assert normalize_gold(rows[0]["answer"]) == "2"
    assert rows[1]["answer"] == "4" and rows[1]["solution"] == "So $\\boxed{4}$." and rows[1]["level"] == "Level 1"
    assert rows[1]["id"] == 1


def test_explicit_fields_and_numeric_answer(tmp_path):
    p = _jsonl(tmp_path / "x.jsonl", [{"prompt": "How many?", "target": 12, "id": "a"}])
    rows = read_rows(p, question_field="prompt", answer_field="target")
    assert rows == [{"id": "a", "question": "How many?", "answer": "12", "prompt": "How many?", "target": 12}]
    with pytest.raises(TagrpoError, match=r"x\.jsonl, line 1: no question: field 'question' or 'problem'"):
        read_rows(p)


def test_bad_json_names_file_and_line(tmp_path):
    p = _jsonl(tmp_path / "bad.jsonl", [{"question": "q?", "answer": "1"}, "", '{"question": "oops", ', ])
    with pytest.raises(TagrpoError, match=r"bad\.jsonl, line 3: invalid JSON"):
        read_rows(p)
    j = tmp_path / "bad.json"
    j.write_text('[\n {"question": "a", "answer": "1"},\n {"question": }\n]\n')
    with pytest.raises(TagrpoError, match=r"bad\.json, line 3: invalid JSON"):
        read_rows(j)


def test_missing_fields_raise_or_skip_with_report(tmp_path):
    p = _jsonl(tmp_path / "m.jsonl", [
        {"question": "A?", "answer": "1"},
        {"question": "B?"},
        {"answer": "3"},
        {"question": "", "answer": "4"},
        [1, 2],
        {"question": 5, "answer": "5"},
        {"question": "C?", "answer": "6"},
    ])
    with pytest.raises(TagrpoError, match=r"m\.jsonl, line 2: no answer: field 'answer' or 'solution'"):
        read_rows(p)
    skipped: list[SkippedRow] = []
    rows = read_rows(p, skipped=skipped)
    assert [r["question"] for r in rows] == ["A?", "C?"]
    assert [r["id"] for r in rows] == [0, 6]  # position in the file, stable whatever is skipped
    assert [(s.line, s.field) for s in skipped] == [(2, "answer"), (3, "question"), (4, "question"), (5, "row"), (6, "question")]
    assert all(str(s).startswith(f"{p}, line ") for s in skipped)


def test_unknown_suffix_and_missing_file(tmp_path):
    with pytest.raises(TagrpoError, match=r"\.csv.*\.jsonl, \.json, \.parquet"):
        read_rows(tmp_path / "a.csv")
    with pytest.raises(FileNotFoundError):
        read_rows(tmp_path / "nope.jsonl")
    with pytest.raises(TagrpoError, match="cannot write"):
        write_rows(tmp_path / "a.txt", [])


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".parquet"])
def test_round_trip(tmp_path, suffix):
    rows = [
        {"id": i, "question": f"Q{i} costs $5?", "answer": f"#### {i}", "neighbors": [f"n{i}a", f"n{i}b"], "extra": "ü"}
        for i in range(5)
    ]
    p = tmp_path / f"rows{suffix}"
    write_rows(p, rows)
    assert read_rows(p) == rows
    assert [f for f in os.listdir(tmp_path) if f != p.name] == []  # no temp file left


def test_parquet_input_with_math_names(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    p = tmp_path / "m.parquet"
    pq.write_table(pa.Table.from_pylist([{"problem": "Find $x$.", "solution": "$\\boxed{3}$"}]), p)
    assert read_rows(p) == [{"id": 0, "question": "Find $x$.", "answer": "$\\boxed{3}$", "problem": "Find $x$.", "solution": "$\\boxed{3}$"}]


def test_write_is_atomic_on_failure(tmp_path):
    p = tmp_path / "out.jsonl"
    write_rows(p, [{"id": 0, "question": "old", "answer": "1"}])
    before = p.read_bytes()
    with pytest.raises(TypeError):
        write_rows(p, [{"id": 1, "question": "new", "answer": "2"}, {"bad": object()}])
    assert p.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["out.jsonl"]
