"""math_reward on a table of real cases, answer extraction, gold normalization, GSM8K gold
answers from the shared data, and hostile inputs under a hard time bound (worker kill)."""

from __future__ import annotations

import json
import re
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tagrpo.rewards import (
    MathVerifier,
    extract_boxed,
    extract_final_answer,
    math_reward,
    normalize_gold,
)

HANG_GUARD_S = 30.0  # a ceiling against hangs only; the real bound is the verifier's timeout

# (completion, gold answer, expected reward)
CASES = [
    # the same number written differently
    (r"So the probability is \boxed{0.5}.", "1/2", 1.0),
    (r"\boxed{\frac12}", "1/2", 1.0),
    (r"$\boxed{\dfrac{1}{2}}$", "0.5", 1.0),
    (r"\boxed{\frac{1}{2}}", r"\frac12", 1.0),
    (r"\boxed{1/2}", r"\dfrac{1}{2}", 1.0),
    (r"\boxed{\tfrac{2}{4}}", "1/2", 1.0),
    (r"\boxed{12.0}", "12", 1.0),
    (r"\boxed{ 012 }", "12", 1.0),
    (r"\boxed{0.333}", "1/3", 0.0),
    # GSM8K gold answers and thousands separators
    (r"so the total is \boxed{1,234}", "He pays 1,000 + 234 = 1,234.\n#### 1,234", 1.0),
    ("The final answer is 1,234", "#### 1234", 1.0),
    ("The final answer is 1234.", "#### 1,234", 1.0),
    ("The answer is 1,000,000.", "#### 1,000,000", 1.0),
    ("The answer is 1,000,001.", "#### 1,000,000", 0.0),
    (r"\boxed{1{,}234}", "1234", 1.0),
    (r"\boxed{1\,234}", "1234", 1.0),
    ("It costs $1,234.50 in total. The final answer is $1,234.50", "1234.5", 1.0),
    (r"\boxed{\$18.50}", "18.5", 1.0),
    (r"\boxed{18 \text{ dollars}}", "18", 1.0),
    (r"\boxed{50\%}", "#### 50", 1.0),
    ("Step 1: 5 - 12 = -7. The final answer is -7", "#### -7", 1.0),
    ("#### 72", "Natalia sold 48/2 = 24 clips in May.\n#### 72", 1.0),
    # MATH gold solutions with nested braces
    (r"\boxed{\frac{\sqrt{3}}{2}}", r"So $\sin 60^\circ = \boxed{\frac{\sqrt{3}}{2}}$.", 1.0),
    (r"\boxed{\frac{\sqrt3}{2}}", r"So $\sin 60^\circ = \boxed{\frac{\sqrt{3}}{2}}$.", 1.0),
    (r"\boxed{\frac{1}{\sqrt{3}}}", r"Rationalizing, $\boxed{\frac{\sqrt{3}}{3}}$.", 1.0),
    (r"\boxed{\frac{\frac{1}{2}}{3}}", r"\frac16", 1.0),
    (r"\boxed{\left( 3, \frac{\pi}{2} \right)}", r"The point is $\boxed{\left( 3, \frac{\pi}{2} \right)}$.", 1.0),
    (r"\boxed{(3, \frac{\pi}{2})}", r"\left( 3, \frac{\pi}{2} \right)", 1.0),
    # sqrt, pi, algebra
    (r"\boxed{\sqrt{12}}", r"2\sqrt{3}", 1.0),
    (r"\boxed{3\sqrt{2}}", r"\sqrt{18}", 1.0),
    (r"$\boxed{\dfrac{\sqrt{2}}{2}}$", r"\frac{1}{\sqrt2}", 1.0),
    (r"\boxed{\pi \cdot 2}", r"2\pi", 1.0),
    (r"\boxed{\frac{\pi}{2}}", r"\pi/2", 1.0),
    (r"\boxed{6.28}", r"2\pi", 0.0),
    (r"\boxed{\frac{\pi}{3}}", "60", 0.0),
    (r"\boxed{x^2+2x+1}", r"(x+1)^2", 1.0),
    (r"\boxed{(x+1)^2}", r"x^2+2x+1", 1.0),
    (r"\boxed{x^2+1}", r"(x+1)^2", 0.0),
    (r"\boxed{x = 5}", "5", 1.0),
    # intervals and sets
    (r"\boxed{[2, 5)}", "[2,5)", 1.0),
    (r"\boxed{(2, 5]}", "[2,5)", 0.0),
    (r"\boxed{(-\infty, 3)}", r"(-\infty,3)", 1.0),
    (r"\boxed{\{1, 2\}}", r"\{1,2\}", 1.0),
    # negative numbers
    (r"\boxed{-3}", "-3", 1.0),
    (r"\boxed{-3}", "3", 0.0),
    (r"\boxed{5}", "-5", 0.0),
    (r"The answer is \boxed{-\frac{2}{3}}", r"-\frac23", 1.0),
    (r"\boxed{\frac{-1}{2}}", "-0.5", 1.0),
    # final-answer lines when there is no box
    ("The final answer is 12", "#### 12", 1.0),
    ("Answer: 12", "#### 12", 1.0),
    ("So x = 3.\n**Answer:** 12\n", "12", 1.0),
    ("the answer is $12$.", "#### 12", 1.0),
    ("The final answer is: 12", "12", 1.0),
    ("Final Answer: The final answer is $\\frac{3}{4}$. I hope it is correct.", "0.75", 1.0),
    ("Answer: 12\nWait, the final answer is 15.", "15", 1.0),  # the last line wins
    ("Answer: 12\nWait, the final answer is 15.", "12", 0.0),
    ("Answer: 13", "#### 12", 0.0),
    # the last box wins
    (r"First \boxed{3}, wait, actually \boxed{4}", "4", 1.0),
    (r"First \boxed{3}, wait, actually \boxed{4}", "3", 0.0),
    (r"\boxed{4} and then \boxed{5", "4", 1.0),  # an unclosed box is not a box
    (r"\fbox{5}", "5", 1.0),
    # no answer at all
    ("I think it is 12 but I am not sure", "12", 0.0),
    (r"\boxed{12", "12", 0.0),
    (r"\boxed{}", "12", 0.0),
    ("", "12", 0.0),
    ("   ", "12", 0.0),
    (r"\boxed{12}", "", 0.0),
    (r"\boxed{12}", "   ", 0.0),
    (r"\boxed{12}", "#### ", 0.0),
    # non-string inputs
    (None, "12", 0.0),
    (12, "12", 0.0),
    (b"\\boxed{12}", "12", 0.0),
    (["\\boxed{12}"], "12", 0.0),
    (float("nan"), "12", 0.0),
    (r"\boxed{None}", None, 0.0),
    (r"\boxed{True}", True, 0.0),
    (r"\boxed{[1]}", [1], 0.0),
    (r"\boxed{12}", 12, 1.0),  # a numeric gold is fine
    (r"\boxed{2.5}", 2.5, 1.0),
]


def test_table_has_enough_cases():
    assert len(CASES) >= 40


@pytest.mark.parametrize("completion, answer, expected", CASES, ids=[f"{i:02d}" for i in range(len(CASES))])
def test_math_reward_table(completion, answer, expected):
    assert math_reward(completion, answer) == expected


# --- extraction ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, want",
    [
        (r"\boxed{\frac{\sqrt{3}}{2}}", r"\frac{\sqrt{3}}{2}"),
        (r"a \boxed{1} b \boxed{ 2 } c", "2"),
        (r"\boxed{\{1, 2\}}", r"\{1, 2\}"),  # escaped braces do not close the box
        (r"\boxed{a\}b}", r"a\}b"),
        (r"\boxed {7}", "7"),
        (r"\boxed{1} \boxed{2", "1"),
        (r"\boxed{\boxed{3}}", "3"),  # the box that starts last and is complete: the inner one
        ("no box", None),
        (r"\boxed{", None),
    ],
)
def test_extract_boxed(text, want):
    assert extract_boxed(text) == want


@pytest.mark.parametrize(
    "text, want",
    [
        ("The final answer is 42.", "42"),
        ("The final answer is $\\frac{1}{2}$.", "\\frac{1}{2}"),
        ("reasoning\nAnswer: 7\n", "7"),
        ("reasoning\n**Answer**: 7", "7"),
        ("so the answer is 9", "9"),
        ("#### 1,234", "1,234"),
        ("The final answer is \\(5\\)", "5"),
        ("The answer is 3. Then the final answer is 4.", "4"),
        ("Final answer: \\boxed{8} hmm", "8"),
        ("nothing here", None),
        ("", None),
        (None, None),
        (17, None),
    ],
)
def test_extract_final_answer(text, want):
    assert extract_final_answer(text) == want


@pytest.mark.parametrize(
    "answer, want",
    [
        ("Some steps 3 + 4 = 7.\n#### 7", "7"),
        ("#### 1,234", "1234"),
        ("#### -5", "-5"),
        (r"Thus $x = \boxed{\frac{\sqrt{3}}{2}}$.", r"\frac{\sqrt{3}}{2}"),
        (r"First \boxed{1}, finally \boxed{2}.", "2"),
        ("  42  ", "42"),
        ("$\\frac{1}{2}$", "\\frac{1}{2}"),
        (72, "72"),
    ],
)
def test_normalize_gold(answer, want):
    assert normalize_gold(answer) == want


def test_gsm8k_gold_answers_from_shared_data(data_dir):
    path = data_dir / "gsm8k_dev.jsonl"
    if not path.is_file():
        pytest.skip(f"{path} not present (it lives next to the repository, not in it)")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    assert len(rows) >= 100
    v = MathVerifier(timeout=5.0)
    try:
        for row in rows:
            gold = row["answer"].rsplit("####", 1)[1].strip()
            value = int(gold.replace(",", ""))
            assert v(f"Reasoning...\nThe final answer is \\boxed{{{value:,}}}.", row["answer"]) == 1.0, gold
            assert v(f"The final answer is {value}", row["answer"]) == 1.0, gold
            assert v(f"\\boxed{{{value + 1}}}", row["answer"]) == 0.0, gold
        # plain numbers never need the symbolic worker
        assert v.stats["symbolic"] == 0 and v.stats["fast"] == 3 * len(rows)
    finally:
        v.close()


# --- hostile inputs: bounded by the worker kill -------------------------------------------------
@pytest.fixture(scope="module")
def verifier():
    v = MathVerifier(timeout=1.0)
    yield v
    v.close()


HOSTILE = {
    "power-tower": (r"\boxed{9^{9^{9^{9}}}}", "1"),
    "power-tower-vs-itself-plus-one": (r"\boxed{9^{9^{9^{9}}}}", r"9^{9^{9^{9}}}+1"),
    "huge-factorial": (r"\boxed{(10^{100})!}", "1"),
    "100kb-balanced-braces": ("\\boxed{" + "{" * 50_000 + "}" * 50_000 + "}", "1"),
    "100kb-open-braces": ("\\boxed{" + "{" * 100_000, "1"),
    "100kb-bare-braces": ("{" * 100_000, "1"),
    "100kb-close-braces": ("}" * 100_000 + "\\boxed{1", "1"),
    "20k-unclosed-boxes": ("\\boxed{" * 20_000, "1"),
    "nested-fractions-200": ("\\boxed{" + "\\frac{1}{" * 200 + "2" + "}" * 200 + "}", "1"),
    "continued-fraction-30": ("\\boxed{" + "\\frac{1}{1+" * 30 + "1" + "}" * 30 + "}", "1"),
    "200k-newlines": ("\n" * 200_000 + "x", "1"),
    "whitespace-mix": ("\t\n " * 66_000, "1"),
    "answer-then-newlines": ("The final answer is" + "\n" * 100_000, "1"),
    "5000-digit-number": ("The final answer is " + "9" * 5000, "1"),
    "1mb-text": ("x" * 1_000_000 + "\\boxed{2}", "1"),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_inputs_return_zero_without_hanging(verifier, name):
    completion, answer = HOSTILE[name]
    t0 = time.monotonic()
    assert verifier(completion, answer) == 0.0
    assert time.monotonic() - t0 < HANG_GUARD_S  # hang guard only
    # and the verifier still works afterwards (a fresh worker after a kill)
    assert verifier(r"\boxed{\frac{\sqrt3}{2}}", r"\frac{\sqrt{3}}{2}") == 1.0


def test_a_hanging_check_is_killed(verifier):
    before = verifier.stats["timeouts"]
    assert verifier(r"\boxed{9^{9^{9^{9}}}}", "2") == 0.0  # sympy cannot evaluate this on any machine
    assert verifier.stats["timeouts"] == before + 1
    assert verifier._proc is None  # killed; the next symbolic call starts a fresh worker
    assert verifier(r"\boxed{x^2+2x+1}", "(x+1)^2") == 1.0


def test_a_dead_worker_is_replaced(verifier):
    assert verifier(r"\boxed{2\sqrt{3}}", r"\sqrt{12}") == 1.0
    verifier._proc.kill()
    verifier._proc.wait()
    assert verifier(r"\boxed{2\sqrt{3}}", r"\sqrt{12}") == 1.0


def test_extraction_is_linear_on_large_inputs():
    # these took minutes with quadratic scans; a hang guard only, no speed target
    t0 = time.monotonic()
    for text in ("\\boxed{" * 20_000, "\n" * 200_000 + "x", "\t\n " * 66_000, "\n" + "*" * 200_000):
        assert extract_final_answer(text) is None
    assert extract_final_answer("\\boxed{" * 20_000 + "\\boxed{7}") == "7"
    assert time.monotonic() - t0 < HANG_GUARD_S


_ALPHABET = list("0123456789{}()[]^_,.-+=/ \n$x") + [r"\boxed{", r"\frac", r"\sqrt", r"\pi", "####", "Answer: ", "final answer is "]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(_ALPHABET), max_size=60).map("".join), st.lists(st.sampled_from(_ALPHABET), max_size=20).map("".join))
def test_property_extraction_never_raises(text, gold):
    out = extract_final_answer(text)
    assert out is None or isinstance(out, str)
    assert isinstance(normalize_gold(gold), str)
    b = extract_boxed(text)
    if b is not None:  # a returned box is balanced
        depth = 0
        for tok in re.findall(r"\\.|[{}]", b):
            depth += {"{": 1, "}": -1}.get(tok, 0)
            assert depth >= 0
        assert depth == 0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(_ALPHABET), max_size=40).map("".join), st.lists(st.sampled_from(_ALPHABET), max_size=12).map("".join))
def test_property_math_reward_never_raises(verifier, text, gold):
    assert verifier(text, gold) in (0.0, 1.0)


def test_math_reward_answer_equals_itself():
    for gold in ["7", r"\frac{3}{4}", r"2\sqrt{2}", r"(1, 2)", r"x^2 - 1", "-12"]:
        assert math_reward(f"\\boxed{{{gold}}}", gold) == 1.0, gold
