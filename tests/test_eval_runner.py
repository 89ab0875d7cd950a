"""The evaluation runner: pass@k aggregation from stored samples (against brute-force
enumeration), k > n refused, `evaluate` with a scripted engine (exact metrics, seeds, greedy),
re-scoring, and the result table."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest

from tagrpo.errors import TagrpoError
from tagrpo.eval import (
    evaluate,
    make_document,
    read_document,
    rescore,
    results_table,
    summarize,
    write_document,
)
from tagrpo.eval.runner import check_ks, parse_ks
from tagrpo.rollout import Completion, SamplingParams


def brute_pass_at_k(rewards: list[float], k: int) -> float:
    """Fraction of all k-subsets of the samples that contain a correct one."""
    subsets = list(itertools.combinations(range(len(rewards)), k))
    return sum(any(rewards[i] >= 0.5 for i in s) for s in subsets) / len(subsets)


def synthetic_questions(counts: list[tuple[int, int]]) -> list[dict]:
    qs = []
    for i, (n, c) in enumerate(counts):
        samples = [{"text": f"\\boxed{{{1 if j < c else 0}}}", "reward": 1.0 if j < c else 0.0, "tokens": 10 + j,
                    "finished": j % 2 == 0} for j in range(n)]
        qs.append({"id": i, "kind": "math", "question": f"q{i}", "answer": "1", "samples": samples})
    return qs


def test_pass_at_k_aggregation_on_a_samples_file(tmp_path):
    counts = [(4, 0), (4, 1), (4, 2), (4, 4)]
    result = {"pass@k": {"1": None}, "questions": synthetic_questions(counts)}
    doc = make_document([{"name": "m", "benchmarks": {"synthetic": result}}], {"n": 4})
    path = write_document(tmp_path / "samples.json", doc)
    loaded = read_document(path)["models"][0]["benchmarks"]["synthetic"]
    out = summarize(loaded["questions"], [1, 2, 3, 4])
    # known values: per question pass@1 = c/n; pass@2 for c=1: 1 - C(3,2)/C(4,2) = 1/2, c=2: 1 - 1/6
    assert out["pass@k"]["1"] == pytest.approx((0 + 0.25 + 0.5 + 1) / 4)
    assert out["pass@k"]["2"] == pytest.approx((0 + 0.5 + 5 / 6 + 1) / 4)
    assert out["pass@k"]["4"] == pytest.approx(3 / 4)
    for k in (1, 2, 3, 4):
        ref = sum(brute_pass_at_k([s["reward"] for s in q["samples"]], k) for q in loaded["questions"]) / len(counts)
        assert out["pass@k"][str(k)] == pytest.approx(ref)
    assert out["n_questions"] == 4 and out["n_samples"] == 4
    assert out["n_all_correct"] == 1 and out["n_all_wrong"] == 1
    assert out["mean_response_length"] == pytest.approx(11.5)
    assert out["truncation_rate"] == pytest.approx(0.5)


def test_rescore_recomputes_from_texts():
    qs = synthetic_questions([(3, 1), (3, 3)])
    result = {"pass@k": {"1": 0.0, "2": 0.0}, "questions": qs}
    new = rescore(result)  # math_reward on "\\boxed{1}" vs answer "1" agrees with the stored rewards
    assert new["pass@k"]["1"] == pytest.approx((1 / 3 + 1) / 2)
    flipped = rescore(result, reward_fn=lambda text, ans: 0.0 if "1" in text else 1.0)
    assert flipped["pass@k"]["1"] == pytest.approx((2 / 3 + 0) / 2)
    assert [q["n_correct"] for q in flipped["questions"]] == [2, 0]


def test_k_larger_than_n_is_refused():
    with pytest.raises(TagrpoError, match=r"--k 8 is larger than --n 4.*pass@8"):
        check_ks([1, 2, 8], 4)
    check_ks([1, 4], 4)
    assert parse_ks("4,1, 2,2") == [1, 2, 4]
    for bad in ("1,x", "0,1", ""):
        with pytest.raises(TagrpoError):
            parse_ks(bad)

    class NeverCalled:
        def generate(self, prompts, params):
            raise AssertionError("generated although k > n")

    with pytest.raises(TagrpoError, match="larger than --n"):
        evaluate(None, None, [{"question": "q", "answer": "1"}], 2, [1, 4], engine=NeverCalled())


def test_cli_refuses_k_larger_than_n():
    from typer.testing import CliRunner

    from tagrpo.cli import app

    res = CliRunner().invoke(app, ["eval", "--model", "nope", "--data", "nope", "--n", "4", "--k", "1,2,8"])
    assert res.exit_code == 2
    assert "--k 8 is larger than --n 4" in res.output


class ScriptedEngine:
    """Answers '\\boxed{<answer>}' for the first c_i samples of question i (c_i from `correct`),
    '\\boxed{-1}' otherwise; greedy answers correctly for even questions. Records every call."""

    def __init__(self, tokenizer, rows, correct, n):
        self.calls = []
        self.key = {}
        for i, r in enumerate(rows):
            from tagrpo.eval.benchmarks import MATH_TEMPLATE
            from tagrpo.rollout import build_prompt_ids

            self.key[tuple(build_prompt_ids(tokenizer, r["question"], MATH_TEMPLATE))] = i
        self.rows, self.correct, self.n = rows, correct, n
        self.seen = {}

    def generate(self, prompts, params):
        self.calls.append((len(prompts), params))
        out = []
        for p in prompts:
            i = self.key[tuple(p)]
            if not params.do_sample:
                ok = i % 2 == 0
            else:
                j = self.seen.get(i, 0)
                self.seen[i] = j + 1
                ok = j < self.correct[i]
            text = f"step... \\boxed{{{self.rows[i]['answer'] if ok else -1}}}"
            finished = not (i == 0 and params.do_sample)
            out.append(Completion(token_ids=list(range(5 + i)), text=text, finished=finished))
        return out


def test_evaluate_with_a_scripted_engine():
    from tagrpo.models import make_tiny_tokenizer

    tok = make_tiny_tokenizer()
    rows = [{"id": f"q{i}", "question": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(5)]
    correct = [0, 1, 2, 3, 4]
    engine = ScriptedEngine(tok, rows, correct, 4)
    params = SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=32, seed=11)
    res = evaluate(None, tok, rows, 4, "1,2,4", params, greedy=True, batch_size=8, engine=engine, diversity=False)
    counts = [(4, min(c, 4)) for c in correct]
    for k in (1, 2, 4):
        ref = sum(brute_pass_at_k([1.0] * c + [0.0] * (n - c), k) for n, c in counts) / 5
        assert res["pass@k"][str(k)] == pytest.approx(ref)
    assert res["greedy_accuracy"] == pytest.approx(3 / 5)  # questions 0, 2, 4
    assert res["truncation_rate"] == pytest.approx(4 / 20)  # question 0's samples
    assert res["mean_response_length"] == pytest.approx(sum((5 + i) * 4 for i in range(5)) / 20)
    # two questions per chunk (batch 8 // n 4), seeds 11, 12, 13; one greedy call for all 5
    sampled = [p for _, p in engine.calls if p.do_sample]
    assert [p.seed for p in sampled] == [11, 12, 13]
    assert [c for c, p in engine.calls if p.do_sample] == [8, 8, 4]
    assert all(p.temperature == 0.7 and p.top_p == 0.9 and p.max_new_tokens == 32 for p in sampled)
    assert [c for c, p in engine.calls if not p.do_sample] == [5]
    # every sample kept with its reward; stored metrics are what the samples say
    assert [q["n_correct"] for q in res["questions"]] == [0, 1, 2, 3, 4]
    assert all(len(q["samples"]) == 4 and "greedy" in q for q in res["questions"])
    again = summarize(res["questions"], [1, 2, 4])
    assert again["pass@k"] == res["pass@k"]
    assert res["sampling"]["seed"] == 11 and res["sampling"]["n"] == 4
    json.dumps(res)  # serializable as is


def test_results_table_shows_differences():
    from rich.console import Console

    def model(name, p1):
        r = {"n_questions": 3, "pass@k": {"1": p1, "2": p1 + 0.1}, "diversity": 0.3, "mean_response_length": 50.0,
             "truncation_rate": 0.0, "questions": []}
        return {"name": name, "benchmarks": {"gsm8k": r}}

    doc = make_document([model("base", 0.20), model("ta-grpo", 0.25)], {"n": 2})
    console = Console(record=True, width=160)
    console.print(results_table(doc))
    text = console.export_text()
    assert "ta-grpo (Δ)" in text and "20.0" in text and "25.0 (+5.0)" in text and "pass@2" in text


def test_read_document_accepts_bare_results(tmp_path):
    bare = {"pass@k": {"1": 0.5}, "n_questions": 2, "questions": []}
    p = tmp_path / "eval_after.json"
    p.write_text(json.dumps(bare))
    doc = read_document(p)
    assert doc["models"][0]["benchmarks"]["eval_after"]["pass@k"] == {"1": 0.5}
    p.write_text("[1, 2]")
    with pytest.raises(TagrpoError, match="eval_after.json"):
        read_document(p)
    # NaN diversity is written as null (valid JSON for browsers and jq)
    write_document(p, make_document([{"name": "m", "benchmarks": {"b": {"pass@k": {"1": 0.0}, "diversity": math.nan}}}], {}))
    assert "NaN" not in Path(p).read_text()


def test_model_defaults_to_the_embedded_model():
    from typer.testing import CliRunner

    from tagrpo.cli import app

    res = CliRunner().invoke(app, ["eval", "--data", "no-such-file.jsonl", "--n", "2", "--k", "1"])
    assert "Missing option" not in res.output
    assert res.exit_code == 2 and "no-such-file.jsonl" in res.output  # it got past the options to the data
