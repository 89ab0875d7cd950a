"""Validation of a candidate neighbor: is it still the same problem, with the same answer?

TA-GRPO pools the rewards of a question and its neighbors into one advantage, so a neighbor that
is a different problem (a dropped number, a changed formula) or that gives the answer away
poisons the whole family's signal. Plain GRPO has no such step. Every LLM / hf neighbor passes
through `validate_neighbor` before it is accepted (rule neighbors too, as a safety net), and a
rejection carries a stable reason code, stored with the candidate:

    empty, refusal, duplicate_original, answer_not_question, gold_leaked, numbers_changed,
    latex_changed, length_ratio, duplicate_sibling   (+ verify_failed from --verify-solve)

Checks run in that order and the first failure is the reason.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from tagrpo.neighbors.text import (
    canonical_number,
    dollars_are_currency,
    has_question,
    match_segments,
    math_segments,
    normalize_text,
    number_multiset,
)

REASONS = {
    "empty": "the response was empty",
    "refusal": "the model refused",
    "duplicate_original": "same text as the original (after normalization)",
    "answer_not_question": "an answer or a solution instead of a restated question",
    "gold_leaked": "the gold answer appears in the neighbor but not in the original",
    "numbers_changed": "the numbers differ from the original's (as a multiset of values)",
    "latex_changed": "the math segments differ from the original's (beyond consistent renaming)",
    "length_ratio": "length outside the allowed ratio to the original",
    "duplicate_sibling": "same text as another neighbor of the question",
    "verify_failed": "--verify-solve: the model's solution of the neighbor did not match the gold answer",
}

_REFUSAL = re.compile(
    r"\b(?:I'm sorry|I am sorry|I apologi[sz]e|I can't|I cannot|I can not|I'm unable|I am unable|"
    r"I won't|I will not|I'm not able|I am not able|As an AI|as a language model|"
    r"cannot (?:help|assist|comply)|can't (?:help|assist|comply))\b",
    re.IGNORECASE,
)
_ANSWER_MARKERS = re.compile(
    r"\\boxed|####|\bthe (?:final )?answer is\b|\bfinal answer\b|^\s*\**(?:answer|solution)\**\s*:|"
    r"\bstep 1\b|\btherefore\b",
    re.IGNORECASE | re.MULTILINE,
)
_PLAIN_NUMBER = re.compile(r"\s*-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?\s*|\s*-?\.\d+\s*")


@dataclass(frozen=True)
class ValidationConfig:
    """Thresholds of the validator. `min_length_ratio` / `max_length_ratio` bound
    len(neighbor) / len(original) in characters."""

    min_length_ratio: float = 0.5
    max_length_ratio: float = 2.5

    def __post_init__(self):
        if not 0 < self.min_length_ratio <= 1 <= self.max_length_ratio:
            raise ValueError(
                f"length ratios must satisfy 0 < min ({self.min_length_ratio}) <= 1 <= max ({self.max_length_ratio})"
            )


@dataclass(frozen=True)
class Verdict:
    """`ok`, or the first failed check's `reason` code (see REASONS) and a human `detail`."""

    ok: bool
    reason: str | None = None
    detail: str = ""

    @classmethod
    def reject(cls, reason: str, detail: str = "") -> Verdict:
        assert reason in REASONS, reason
        return cls(False, reason, detail or REASONS[reason])


_ACCEPT = Verdict(True)


def _fmt(c: Counter) -> str:
    return ", ".join(f"{k}" + (f" (x{v})" if v > 1 else "") for k, v in sorted(c.items())) or "-"


def _squash(s: str) -> str:
    return re.sub(r"[\s$]", "", s)


def gold_leaked(original: str, neighbor: str, gold: str | None, *, _numbers: tuple[Counter, Counter] | None = None) -> bool:
    """True when the gold answer shows up in the neighbor more often than in the original:
    by value for a plain number, as a substring (spaces ignored, >= 3 characters) otherwise."""
    if gold is None or not str(gold).strip():
        return False
    gold = str(gold)
    if _PLAIN_NUMBER.fullmatch(gold):
        value = canonical_number(gold.strip().lstrip("-"))
        n_o, n_n = _numbers or (number_multiset(original), number_multiset(neighbor))
        return n_n[value] > n_o[value]
    key = _squash(gold)
    if len(key) < 3:
        return False
    return _squash(neighbor).count(key) > _squash(original).count(key)


@dataclass(frozen=True)
class _Original:
    """What the checks need from an original question; computed once per question."""

    refusal: bool
    norm: str
    markers: frozenset[str]
    asks: bool
    numbers: tuple[tuple[str, int], ...]
    currency: bool
    segments: tuple[str, ...]


@lru_cache(maxsize=4096)
def _profile(original: str) -> _Original:
    currency = dollars_are_currency(original)
    return _Original(
        refusal=bool(_REFUSAL.search(original.replace("\u2019", "'"))),
        norm=normalize_text(original),
        markers=frozenset(m.group(0).lower() for m in _ANSWER_MARKERS.finditer(original)),
        asks=has_question(original),
        numbers=tuple(sorted(number_multiset(original).items())),
        currency=currency,
        segments=tuple(math_segments(original, currency)),
    )


def validate_neighbor(
    original: str,
    neighbor: str | None,
    gold: str | None = None,
    *,
    siblings: Iterable[str] = (),
    config: ValidationConfig | None = None,
) -> Verdict:
    """Check one candidate against its original question (and gold answer, already normalized
    with `tagrpo.rewards.normalize_gold`), and against the siblings accepted before it."""
    config = config or ValidationConfig()
    text = (neighbor or "").strip()
    if not text:
        return Verdict.reject("empty")
    orig = _profile(original)
    refusal = _REFUSAL.search(text.replace("\u2019", "'"))
    if refusal and not orig.refusal:
        return Verdict.reject("refusal", f"refusal phrase: {refusal.group(0)!r}")
    norm = normalize_text(text)
    if norm == orig.norm:
        return Verdict.reject("duplicate_original")
    markers = {m.group(0).lower() for m in _ANSWER_MARKERS.finditer(text)} - orig.markers
    if markers:
        return Verdict.reject("answer_not_question", f"answer marker {min(markers)!r}")
    if orig.asks and not has_question(text):
        return Verdict.reject("answer_not_question", "no question or instruction left")
    n_o, n_n = Counter(dict(orig.numbers)), number_multiset(text)
    if gold_leaked(original, text, gold, _numbers=(n_o, n_n)):
        return Verdict.reject("gold_leaked", f"gold answer {gold!r} appears in the neighbor")
    if n_o != n_n:
        return Verdict.reject("numbers_changed", f"missing: {_fmt(n_o - n_n)}; added: {_fmt(n_n - n_o)}")
    seg_o, seg_n = list(orig.segments), math_segments(text, orig.currency)
    if (seg_o or seg_n) and match_segments(seg_o, seg_n) is None:
        missing = Counter(seg_o) - Counter(seg_n)
        return Verdict.reject(
            "latex_changed",
            f"{len(seg_o)} math segments in the original, {len(seg_n)} in the neighbor"
            + (f"; e.g. ${next(iter(missing))}$ not found" if missing else ""),
        )
    ratio = len(text) / max(1, len(original.strip()))
    if not config.min_length_ratio <= ratio <= config.max_length_ratio:
        return Verdict.reject(
            "length_ratio", f"length ratio {ratio:.2f} outside [{config.min_length_ratio}, {config.max_length_ratio}]"
        )
    if norm in {normalize_text(s) for s in siblings}:
        return Verdict.reject("duplicate_sibling")
    return _ACCEPT
