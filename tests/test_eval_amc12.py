"""The AMC12 benchmark: local files in the common public layout (AI-MO/aimo-validation-amc:
`id`, `problem`, float `answer`; `question` accepted too), numeric answers scored like AMC23,
option-letter answers (A-E) scored as five-option multiple choice, the hub path with a stand-in
loader, and errors that name the file, the record and the field. Fixtures are written to tmp_path."""

from __future__ import annotations

import json

import pytest

from tagrpo.errors import TagrpoError
from tagrpo.eval.benchmarks import (
    BENCHMARKS,
    CHOICE5_TEMPLATE,
    load_benchmark,
    load_eval_data,
    scorer_for,
)
from tagrpo.eval.scoring import choice5_reward, choice_letter, choice_reward

AOPS = ("What is $1+2$?\n\n$\\textbf{(A) }1\\qquad\\textbf{(B) }2\\qquad\\textbf{(C) }3\\qquad"
        "\\textbf{(D) }4\\qquad\\textbf{(E) }5$")


def _write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _aimo_records():
    return [
        {"id": 0, "problem": "Find the number of ordered pairs ... ", "answer": 142.0, "url": "https://artofproblemsolving.com/a"},
        {"id": 1, "problem": "What is the probability ... ?", "answer": 0.5, "url": "https://artofproblemsolving.com/b"},
        {"id": 2, "problem": "Compute $\\sqrt{16}$.", "answer": 4, "url": "https://artofproblemsolving.com/c"},
    ]


def test_amc12_is_registered_beside_amc23():
    b = BENCHMARKS["amc12"]
    assert (b.hf_id, b.split, b.question_field, b.answer_field, b.id_field) == ("AI-MO/aimo-validation-amc", "train",
                                                                              "problem", "answer", "id")
    assert "amc23" in BENCHMARKS and BENCHMARKS["amc23"].hf_id == "math-ai/amc23"


def test_numeric_answers_from_a_local_file(tmp_path):
    _write(tmp_path / "amc12.jsonl", _aimo_records())
    rows = load_benchmark("amc12", tmp_path)
    assert [r["id"] for r in rows] == [0, 1, 2]
    assert [r["answer"] for r in rows] == ["142", "0.5", "4"]  # integral floats as ints, as for AMC23
    assert all(r["kind"] == "math" and r["benchmark"] == "amc12" for r in rows)
    assert rows[2]["question"] == "Compute $\\sqrt{16}$."
    math_reward = scorer_for("math")
    assert math_reward("... \\boxed{142}", rows[0]["answer"]) == 1.0
    assert math_reward("... \\boxed{\\frac{1}{2}}", rows[1]["answer"]) == 1.0  # symbolic: math-verify
    assert math_reward("... \\boxed{143}", rows[0]["answer"]) == 0.0
    assert len(load_benchmark("amc12", tmp_path, limit=2)) == 2


def test_question_field_alias_and_other_file_names(tmp_path):
    """`question` works where `problem` is absent (math-ai style); parquet and the dataset's own
    name as file stem are found in --data-dir; `--data AMC12` picks the benchmark."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    recs = [{"id": 7, "question": "How many primes are below 10?", "answer": "4"}]
    pq.write_table(pa.Table.from_pylist(recs), tmp_path / "aimo-validation-amc.parquet")
    label, rows = load_eval_data("AMC12", tmp_path)
    assert label == "amc12" and rows == [{"id": 7, "benchmark": "amc12", "kind": "math",
                                         "question": "How many primes are below 10?", "answer": "4"}]


def test_letter_answers_are_five_option_multiple_choice(tmp_path):
    recs = [
        {"id": "in-text", "problem": AOPS, "answer": "C"},
        {"id": "listed", "problem": "Which is prime?", "answer": "(B)", "options": ["4", "5", "6", "8", "9"]},
        {"id": "numeric", "problem": "What is 2+2?", "answer": "4"},
    ]
    _write(tmp_path / "amc12.jsonl", recs)
    rows = load_benchmark("amc12", tmp_path)
    assert [(r["kind"], r["answer"]) for r in rows] == [("choice5", "C"), ("choice5", "B"), ("math", "4")]
    assert rows[0]["question"] == AOPS  # options already in the text
    assert rows[1]["question"] == "Which is prime?\n\nA) 4\nB) 5\nC) 6\nD) 8\nE) 9"
    assert "(A, B, C, D or E)" in CHOICE5_TEMPLATE
    score = scorer_for("choice5")
    assert score is choice5_reward
    for text in ("\\boxed{C}", "so \\boxed{\\textbf{(C)}}", "\\boxed{(C) 3}", "The final answer is (C)."):
        assert score(text, "C") == 1.0, text
    assert score("\\boxed{E}", "E") == 1.0 and choice_letter("\\boxed{E}", "ABCDE") == "E"
    for text in ("\\boxed{E}", "\\boxed{3}", "no answer", ""):
        assert score(text, "C") == 0.0, text
    assert choice_letter("\\boxed{E}") is None and choice_reward("\\boxed{E}", "E") == 0.0  # GPQA: A-D only


def test_choice5_rows_get_their_own_prompt():
    from tagrpo.eval import evaluate
    from tagrpo.models import make_tiny_tokenizer
    from tagrpo.rollout import Completion

    tok = make_tiny_tokenizer()
    seen = []

    class Engine:
        def generate(self, prompts, params):
            seen.extend(prompts)
            return [Completion(token_ids=[1], text="\\boxed{C}", finished=True) for _ in prompts]

    rows = [{"id": 0, "question": AOPS, "answer": "C", "kind": "choice5"}, {"id": 1, "question": "2+2?", "answer": "4"}]
    res = evaluate(None, tok, rows, 1, [1], engine=Engine(), diversity=False, chat_template=False)
    assert tok.decode(seen[0]) == CHOICE5_TEMPLATE.format(question=AOPS)
    assert [q["n_correct"] for q in res["questions"]] == [1, 0]


def test_errors_name_file_record_and_field(tmp_path):
    _write(tmp_path / "amc12.jsonl", [_aimo_records()[0], {"id": 1, "problem": "What is 2+2?"}])
    with pytest.raises(TagrpoError, match=r"amc12\.jsonl, record 2: field 'answer' missing or empty; "
                                          r"the amc12 layout needs 'problem' \(or 'question'\), 'answer'"):
        load_benchmark("amc12", tmp_path)
    _write(tmp_path / "amc12.jsonl", [{"id": 0, "text": "What is 2+2?", "answer": 4}])
    with pytest.raises(TagrpoError, match=r"record 1: field 'problem' \(or 'question'\) missing or empty"):
        load_benchmark("amc12", tmp_path)
    _write(tmp_path / "amc12.jsonl", [{"id": 0, "problem": "Which is largest?", "answer": "D"}])
    with pytest.raises(TagrpoError, match=r"record 1: the gold answer 'D' is an option letter, but the question lists "
                                          r"no options \(A\) to \(E\)"):
        load_benchmark("amc12", tmp_path)
    (tmp_path / "amc12.jsonl").write_text('{"id": 0, "problem": "x", "answer": 1}\n{"id": 1,\n')
    with pytest.raises(TagrpoError, match=r"amc12\.jsonl, line 2: invalid JSON"):
        load_benchmark("amc12", tmp_path)


def test_hub_path_and_offline_message(tmp_path):
    calls = []

    def fake_loader(hf_id, config, split):
        calls.append((hf_id, config, split))
        return _aimo_records()[:1]

    rows = load_benchmark("amc12", None, hub_loader=fake_loader)
    assert calls == [("AI-MO/aimo-validation-amc", None, "train")] and rows[0]["answer"] == "142"

    def offline(*a, **k):
        raise ConnectionError("no network")

    # an empty --data-dir falls back to the hub; offline, the message says which file to save where
    with pytest.raises(TagrpoError, match=r"'amc12'.*AI-MO/aimo-validation-amc.*amc12\.jsonl.*--data-dir"):
        load_benchmark("amc12", tmp_path, hub_loader=offline)
