"""The neighbor validator: each rejection reason on a case made for it, numbers compared as a
multiset of values, currency vs math dollars, and the LaTeX matcher against a brute-force
reference (every permutation of segments, every letter mapping checked directly)."""

from __future__ import annotations

import itertools
import random

import pytest

from tagrpo.neighbors.text import (
    digit_numbers,
    dollars_are_currency,
    match_segments,
    math_segments,
    math_tokens,
    number_multiset,
    split_sentences,
)
from tagrpo.neighbors.validate import REASONS, ValidationConfig, validate_neighbor

Q = "Steve has 1,000 marbles and gives 25 to each of his five friends. How many marbles does he have left?"
GOLD = "875"


def reason(nb, original=Q, gold=GOLD, **kw):
    v = validate_neighbor(original, nb, gold, **kw)
    assert v.ok == (v.reason is None)
    return v.reason


def test_good_paraphrase_is_accepted():
    assert reason("After giving 25 marbles to each of his five friends, how many of his 1000 marbles does Steve still have?") is None
    # a number written as a word may become digits, and the other way round
    assert reason("Steve owns 1,000 marbles. He hands 25 to each of his 5 friends. How many marbles remain?") is None


@pytest.mark.parametrize(
    "neighbor, expected",
    [
        ("", "empty"),
        ("   \n", "empty"),
        ("I'm sorry, but I can't help with that request.", "refusal"),
        ("As an AI, I cannot rewrite this problem.", "refusal"),
        ("Steve has 1000 marbles and gives 25 to each of his five friends. How many marbles does he have left?", "duplicate_original"),
        ("Steve has 1,000 marbles and gives 25 to each of his five friends. The answer is \\boxed{875}.", "answer_not_question"),
        ("Steve has 1,000 marbles, gives 25 to each of five friends, and keeps the rest of them.", "answer_not_question"),
        ("Steve had 1,000 marbles, gave 25 to each of his five friends and kept 875. How many marbles does he have left?", "gold_leaked"),
        ("Steve has marbles and gives 25 to each of his five friends. How many marbles does he have left?", "numbers_changed"),
        ("Steve has 1,000 marbles and gives 25 to each of his six friends. How many marbles does he have left?", "numbers_changed"),
        ("Steve has 1,000 marbles and gives 25 to each of his five friends and 3 cousins. How many are left?", "numbers_changed"),
        ("Steve: 1,000, 25 each, five friends. Left?", "length_ratio"),
    ],
)
def test_each_rejection_reason(neighbor, expected):
    assert expected in REASONS
    assert reason(neighbor) == expected


def test_sibling_duplicates_and_length_config():
    nb = "How many marbles does Steve have left after giving 25 to each of his five friends from 1,000?"
    assert reason(nb) is None
    assert reason(nb, siblings=[nb.upper()]) == "duplicate_sibling"
    assert reason(nb + " " + "Think carefully. " * 20) == "length_ratio"
    assert reason(nb + " " + "Think carefully. " * 20, config=ValidationConfig(max_length_ratio=10)) is None
    with pytest.raises(ValueError):
        ValidationConfig(min_length_ratio=1.5)


def test_numbers_are_values_not_spellings():
    assert number_multiset("costs $1,000.00 or 1000") == number_multiset("1000 or 1000")
    assert number_multiset("0.80 and .5") == number_multiset("0.8 and 0.5")
    assert number_multiset("twenty-five and twelve") == number_multiset("25 and 12")
    assert number_multiset("sold for $400 000.") == number_multiset("sold for $400,000.")
    assert digit_numbers("1, 2, and 3") == ["1", "2", "3"]  # a list is not a thousands group
    assert digit_numbers("$3.00. Then 1.5 hours") == ["3", "1.5"]


def test_gold_leak_for_latex_answers():
    q = "Simplify $\\frac{28}{6}$ to lowest terms."
    assert validate_neighbor(q, "Reduce the fraction $\\frac{28}{6}$ fully: what do you get?", "\\frac{14}{3}").ok
    v = validate_neighbor(q, "Reduce $\\frac{28}{6}$ to lowest terms: what is it? (Hint: \\frac{14}{3}.)", "\\frac{14}{3}")
    assert v.reason == "gold_leaked"


def test_currency_dollars_are_not_math():
    for text in ["It costs $5 and $10 each.", "$5-$10 per hour", "Each book sells at 20$, and more", "a bunch for $3.00.  Jenny buys 10 for $2"]:
        assert dollars_are_currency(text), text
        assert math_segments(text) == []
    for text in ["If $x^2 = 4$ and $y = 3$, find $x + y$.", "What is $2 \\cdot 3$?", "He pays \\$5 for $n$ pens."]:
        assert not dollars_are_currency(text), text
        assert math_segments(text)


def test_latex_checks():
    q = "Let $f(x) = 3x + 2$. What is $f(4)$?"
    assert reason("What is $f(4)$, given that $f(x) = 3x + 2$?", q, "14") is None  # segments reordered
    assert reason("Let $g(t) = 3t + 2$. What is $g(4)$?", q, "14") is None  # consistent renaming
    assert reason("Let $g(t) = 3x + 2$. What is $g(4)$?", q, "14") == "latex_changed"  # x -> t not everywhere
    assert reason("Let $f(x) = 3x - 2$. What is $f(4)$?", q, "14") == "latex_changed"
    assert reason("Let $f(x) = 3x + 2$. What is f(4)?", q, "14") == "latex_changed"
    assert reason("Let $f(x)=3x+2$. Find $f( 4 )$.", q, "14") is None  # whitespace inside math is free
    # constants and commands are not renameable
    assert reason("Find $x$ when $e^{x} = 5$.", "If $e^{x} = 5$, find $x$.", None) is None
    assert reason("If $a^{x} = 5$, find $x$.", "If $e^{x} = 5$, find $x$.", None) == "latex_changed"
    assert reason("Compute $\\cos y$ for $y = 0$.", "Compute $\\sin y$ for $y = 0$.", None) == "latex_changed"


def _brute_force(original: list[str], neighbor: list[str]) -> bool:
    """Is there an ordering of the neighbor's segments and one bijection of variable letters
    that turns the original's segments into them? Checked token by token."""
    if len(original) != len(neighbor):
        return False
    toks_o = [math_tokens(s) for s in original]
    for perm in itertools.permutations(neighbor):
        toks_n = [math_tokens(s) for s in perm]
        fwd, bwd, ok = {}, {}, True
        for a, b in zip(toks_o, toks_n):
            if len(a) != len(b):
                ok = False
                break
            for x, y in zip(a, b):
                if x.kind != y.kind or (x.kind == "lit" and x.value != y.value):
                    ok = False
                elif x.kind == "var" and (fwd.setdefault(x.value, y.value) != y.value or bwd.setdefault(y.value, x.value) != x.value):
                    ok = False
            if not ok:
                break
        if ok:
            return True
    return False


def test_match_segments_agrees_with_brute_force():
    rng = random.Random(0)
    atoms = ["x", "y", "z", "a", "+", "2", "\\sin ", "^2", "e"]
    checked = positives = 0
    for _ in range(600):
        k = rng.randint(1, 4)
        original = ["".join(rng.choice(atoms) for _ in range(rng.randint(1, 4))) for _ in range(k)]
        letters = ["x", "y", "z", "a", "b", "c"]
        perm = dict(zip(letters, rng.sample(letters, len(letters))))
        neighbor = ["".join(perm.get(ch, ch) if ch in "xyza" and not seg[max(0, i - 3):i].endswith("\\si") else ch
                            for i, ch in enumerate(seg)) for seg in original]
        rng.shuffle(neighbor)
        if rng.random() < 0.4:  # corrupt one segment
            j = rng.randrange(k)
            neighbor[j] = neighbor[j] + rng.choice(["x", "+", "2", "y"])
        if rng.random() < 0.2:
            neighbor = neighbor[:-1]
        expected = _brute_force(original, neighbor)
        got = match_segments(original, neighbor)
        assert (got is not None) == expected, (original, neighbor)
        checked += 1
        positives += expected
    assert checked == 600 and 100 < positives < 500


def test_sentence_splitting_respects_abbreviations_decimals_and_math():
    text = 'Mr. Tan paid $3.50 at 9 a.m. today. Then $x = 1.5$. Is it "good." Yes? Dr. Li agrees.'
    assert split_sentences(text) == ["Mr. Tan paid $3.50 at 9 a.m. today.", "Then $x = 1.5$.", 'Is it "good."', "Yes?", "Dr. Li agrees."]
