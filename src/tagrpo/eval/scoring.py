"""Scoring evaluation samples by row kind: "math" rows with `tagrpo.rewards.math_reward` (the last
`\\boxed{}`, exact numbers first, math-verify as the fallback), multiple-choice rows by the option
letter in the final `\\boxed{}`: "choice" (GPQA-Diamond, options A-D) and "choice5" (AMC
problems kept in their five-option form, A-E). The same scorer for every model (GRPO or TA-GRPO).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache

from tagrpo.errors import TagrpoError
from tagrpo.rewards.extract import extract_final_answer

LETTERS = "ABCD"  # GPQA's four options
LETTERS5 = "ABCDE"  # AMC's five options
_LATEX_WRAP = re.compile(r"\\(?:text|textbf|mathrm|mathbf)\s*\{([^{}]*)\}")


@cache
def _letter_patterns(letters: str) -> tuple[re.Pattern, ...]:
    upper, lower = f"[{letters[0]}-{letters[-1]}]", f"[{letters[0].lower()}-{letters[-1].lower()}]"
    return (
        re.compile(rf"^\(?({upper})\)?(?:$|[\s.:)\]])"),  # "C", "(C)", "C)", "C. 42", "C: ..."
        re.compile(rf"^\(?({lower})\)?$"),  # a lone lower-case letter ("a pair" is not an option)
        re.compile(rf"^(?:option|choice|answer)\s*:?\s*\(?({upper})\)?(?:$|[\s.:)])", re.IGNORECASE),
    )


def choice_letter(completion: str, letters: str = LETTERS) -> str | None:
    """The option letter (one of `letters`, A-D by default) of a completion's final answer (last
    `\\boxed{}`, else a final-answer line), or None. `\\boxed{C}`, `\\boxed{(C)}`,
    `\\boxed{\\text{C}}`, `\\boxed{\\textbf{(C)}}`, `\\boxed{C) 42}` all give "C"."""
    pred = extract_final_answer(completion)
    if pred is None:
        return None
    pred = _LATEX_WRAP.sub(r"\1", pred).strip().strip("$").strip()
    for pat in _letter_patterns(letters):
        m = pat.match(pred)
        if m:
            return m.group(1).upper()
    return None


def _letter_reward(completion: str, answer: str, letters: str) -> float:
    try:
        letter = choice_letter(completion, letters)
        return 1.0 if letter is not None and letter == str(answer).strip().upper() else 0.0
    except Exception:  # noqa: BLE001 - a reward must never raise
        return 0.0


def choice_reward(completion: str, answer: str) -> float:
    """1.0 when the completion's final letter (A-D) equals the gold letter, else 0.0. Never raises."""
    return _letter_reward(completion, answer, LETTERS)


def choice5_reward(completion: str, answer: str) -> float:
    """As `choice_reward`, for five options (A-E, AMC). Never raises."""
    return _letter_reward(completion, answer, LETTERS5)


def scorer_for(kind: str) -> Callable[[str, str], float]:
    """The reward for a row kind: "math" -> tagrpo.rewards.math_reward, "choice" -> choice_reward,
    "choice5" -> choice5_reward."""
    if kind == "math":
        from tagrpo.rewards import math_reward

        return math_reward
    if kind == "choice":
        return choice_reward
    if kind == "choice5":
        return choice5_reward
    raise TagrpoError(f"unknown row kind {kind!r}; choose one of math, choice, choice5")
