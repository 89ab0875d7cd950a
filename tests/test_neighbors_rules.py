"""Rule neighbors on real GSM8K questions (all 500 dev rows) and on LaTeX problems: every
neighbor passes the validator, differs from its original, keeps its numbers; renaming is
consistent; the rules are deterministic given a seed."""

from __future__ import annotations

import random
import re
from collections import Counter
from pathlib import Path

import pytest

from tagrpo.data import read_rows
from tagrpo.neighbors import BuildOptions, RuleBackend, build_neighbors, validate_neighbor
from tagrpo.neighbors.rules import (
    TRANSFORMATIONS,
    format_givens,
    instruct,
    rename,
    reorder,
    transform,
)
from tagrpo.neighbors.text import math_segments, normalize_text, number_multiset
from tagrpo.rewards import normalize_gold

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="module")
def gsm8k():
    rows = read_rows(DATA / "gsm8k_dev.jsonl")
    assert len(rows) >= 200
    return rows


def test_every_rule_neighbor_is_valid_on_gsm8k(gsm8k):
    applied = Counter()
    for row in gsm8k:
        q, gold = row["question"], normalize_gold(row["answer"])
        for t in TRANSFORMATIONS:
            for s in range(4):
                nb = transform(q, t, s, seed=0)
                if nb is None:
                    continue
                applied[t] += 1
                verdict = validate_neighbor(q, nb, gold)
                assert verdict.ok, (t, s, verdict, q, nb)
                assert normalize_text(nb) != normalize_text(q)
                assert number_multiset(nb) == number_multiset(q)
                # the digits themselves, character for character, are all still there
                assert sorted(re.findall(r"\d+", nb)) == sorted(re.findall(r"\d+", q))
    # every transformation applies to a good share of real questions
    assert applied["instruct"] == 4 * len(gsm8k)
    assert applied["reorder"] > len(gsm8k) and applied["format"] > 2 * len(gsm8k)
    assert applied["rename"] > len(gsm8k)


def test_rename_is_consistent_on_gsm8k(gsm8k):
    renamed = 0
    for row in gsm8k:
        q = row["question"]
        r = rename(q, random.Random(row["id"]))
        if r is None:
            continue
        renamed += 1
        text, mapping = r
        assert len(set(mapping.values())) == len(mapping)  # injective
        for old, new in mapping.items():
            assert not re.search(rf"\b{old}\b", text), (old, text)  # every occurrence replaced
            assert not re.search(rf"\b{new}\b", q, re.IGNORECASE)  # the new name was not in the original
            assert len(re.findall(rf"\b{new}\b", text)) == len(re.findall(rf"\b{old}\b", q))
        # undoing the mapping gives back the original exactly
        inverse = {v: k for k, v in mapping.items()}
        back = re.sub(r"\b(" + "|".join(map(re.escape, inverse)) + r")\b", lambda m, inv=inverse: inv[m.group(1)], text)
        assert back == q
    assert renamed >= 200


def test_rules_are_deterministic_given_a_seed(gsm8k):
    qs = [r["question"] for r in gsm8k[:50]]
    a = [transform(q, t, s, seed=3) for q in qs for t in TRANSFORMATIONS for s in range(3)]
    b = [transform(q, t, s, seed=3) for q in qs for t in TRANSFORMATIONS for s in range(3)]
    c = [transform(q, t, s, seed=4) for q in qs for t in TRANSFORMATIONS for s in range(3)]
    assert a == b
    assert a != c


def test_builder_gives_three_distinct_valid_neighbors(gsm8k):
    rows = gsm8k[:250]
    out, report = build_neighbors(rows, RuleBackend(seed=0), options=BuildOptions(n=3))
    assert len(out) == len(rows)
    complete = 0
    for row, o in zip(rows, out):
        assert o["question"] == row["question"] and o["answer"] == row["answer"] and o["id"] == row["id"]
        nbs = o["neighbors"]
        assert len(nbs) <= 3
        complete += len(nbs) == 3
        norms = [normalize_text(x) for x in nbs]
        assert len(set(norms)) == len(norms) and normalize_text(row["question"]) not in norms
        for nb in nbs:
            assert validate_neighbor(row["question"], nb, normalize_gold(row["answer"])).ok
    assert complete == report.rows_complete
    assert complete >= 0.98 * len(rows)
    assert report.rejected == Counter()


def test_reorder_format_instruct_shapes():
    q = "Tom has 3 apples. He buys 5 more. How many apples does he have now?"
    assert reorder(q) == "How many apples does he have now? Tom has 3 apples. He buys 5 more."
    assert format_givens(q) == "Given:\n- Tom has 3 apples.\n- He buys 5 more.\nFind: How many apples does he have now?"
    cond = "Mr. Li sells pens for $1.50 each. If he sells 12 pens, how much money does he make?"
    assert format_givens(cond) == (
        "Given:\n- Mr. Li sells pens for $1.50 each.\n- He sells 12 pens.\nFind: How much money does he make?"
    )
    assert reorder("How many legs do 3 cats have?") is None  # one sentence: nothing to move
    assert q in instruct(q, 0) and instruct(q, 0) != instruct(q, 1)


LATEX = [
    "Let $f(x) = \\sin x + 3x^2$ for all real $x$, and let $a$ be a constant with $f(a) = 2$. Find $f(\\pi)$.",
    "A rectangle has length $5\\text{ cm}$ and width $w$. If its area is $30$, what is $w$?",
    "Solve for $y$: $\\frac{y}{4} + 2 = 7$. Express $y$ as an integer.",
    "If $e^{x} = 5$ and $\\log_2 b = 3$, what is $x \\cdot b$?",
    "Compute \\(\\sqrt{n^2 + 9}\\) when $n = 4$.",
]


@pytest.mark.parametrize("q", LATEX)
def test_latex_rename_keeps_math_modulo_consistent_renaming(q):
    r = rename(q, random.Random(0))
    assert r is not None, q
    text, mapping = r
    assert mapping
    assert validate_neighbor(q, text).ok
    assert number_multiset(text) == number_multiset(q)
    # commands, \text{} groups and constants are untouched
    for keep in re.findall(r"\\[A-Za-z]+(?:\{[^}]*\})?", q):
        if keep.startswith("\\text"):
            assert keep in text
    assert text.count("\\sin") == q.count("\\sin") and text.count("e^{") == q.count("e^{")
    # each original segment maps onto the renamed one letter by letter, with one mapping
    for a, b in zip(math_segments(q), math_segments(text)):
        assert len(a) == len(b)
        for ca, cb in zip(a, b):
            if ca != cb:
                assert mapping[ca] == cb


def test_latex_rename_leaves_letters_that_also_stand_in_prose():
    q = "Let $a$ be a number with $a + b = 10$ and $b = 4$. What is $a$?"
    text, mapping = rename(q, random.Random(1))
    assert "a" not in mapping  # 'a' is also the article in the prose: renaming it is unsafe
    assert "b" in mapping and f"${mapping['b']} = 4$" in text
