"""Text analysis shared by the rule transformations and the validator: numbers, LaTeX math
segments (in `latex.py`, re-exported here), sentences, and normalized text for duplicate checks.

A TA-GRPO neighbor must be the same problem as its original (plain GRPO never rewrites the
question, so it needs none of this). These helpers define what "the same numbers" and "the same
math" mean: numbers are compared by value as a multiset (`1,000` == `1000`, `0.80` == `0.8`,
`five` == `5`), LaTeX segments by their token structure with single-letter variables allowed to
be renamed consistently (a bijection), and `$` is told apart as currency (GSM8K) or math (MATH).
"""

from __future__ import annotations

import re
from collections import Counter
from decimal import Decimal, InvalidOperation

from tagrpo.neighbors.latex import (  # noqa: F401 - re-exported: callers import them from here
    _ASY,
    FIXED_ARG_COMMANDS,
    FIXED_LETTERS,
    MathSpan,
    MathToken,
    dollars_are_currency,
    match_segments,
    math_segments,
    math_spans,
    math_tokens,
    segment_shape,
)

# --- numbers -----------------------------------------------------------------------------------

_NUMBER = re.compile(
    r"(?=[\d.])(?:"
    r"(?<=\$)\d{1,3}(?:[ \u00a0\u202f]\d{3})+(?!\d|[.,]\d)"  # $400 000 (space-grouped, after a $)
    r"|(?<![\d.])(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?"  # 1,000  1000  1.5
    r"|(?<![\d.])\.\d+"  # .5
    r")"
)
_UNITS = {
    "zero": 0, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14,
    "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19,
}
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90}
_DIGIT_WORDS = {"one": 1, **{k: v for k, v in _UNITS.items() if v < 10}}
_WORD = re.compile(r"[a-z]+")


def canonical_number(token: str) -> str:
    """`1,000` -> `1000`, `0.80` -> `0.8`, `$400 000` -> `400000`."""
    cleaned = re.sub(r"[,\s\u00a0\u202f]", "", token)
    try:
        d = Decimal(cleaned)
    except InvalidOperation:
        return cleaned
    s = format(d.normalize(), "f")
    return s


def digit_numbers(text: str) -> list[str]:
    """Canonical values of the numbers written with digits, in order (signs ignored)."""
    text = text.replace("{,}", ",")
    return [canonical_number(m.group(0)) for m in _NUMBER.finditer(text)]


def word_numbers(text: str) -> list[str]:
    """Values of numbers written as words (`two` .. `ninety-nine`; `one` is left out: it is too
    often not a quantity, as in "one of them")."""
    low = text.lower()
    words = list(_WORD.finditer(low))
    out = []
    k = 0
    while k < len(words):
        w = words[k].group(0)
        if w in _TENS:
            value = _TENS[w]
            if k + 1 < len(words) and words[k + 1].group(0) in _DIGIT_WORDS and low[words[k].end() : words[k + 1].start()] in ("-", " "):
                value += _DIGIT_WORDS[words[k + 1].group(0)]
                k += 1
            out.append(str(value))
        elif w in _UNITS:
            out.append(str(_UNITS[w]))
        k += 1
    return out


def number_multiset(text: str) -> Counter[str]:
    """Multiset of the values of all numbers in text (digits and number words)."""
    return Counter(digit_numbers(text)) + Counter(word_numbers(text))


# --- sentences ---------------------------------------------------------------------------------

_ABBREVIATIONS = frozenset({
    "mr", "mrs", "ms", "dr", "st", "jr", "sr", "prof", "vs", "etc", "e.g", "i.e", "a.m", "p.m",
    "approx", "no", "mt", "ft", "inc", "co", "ltd", "u.s", "fig", "eq", "sq", "lb", "lbs", "oz",
    "in", "min", "hr", "hrs", "yd", "yds", "gal", "pt", "qt", "vol", "cf", "al",
})
_BOUNDARY = re.compile(r"(?<=[.!?])[\"'”’)\]]*\s+(?=[\"“‘(\[]?[A-Z0-9$\\])")
_PLACEHOLDER = "\x01{}\x02"


def _mask_protected(text: str) -> tuple[str, list[str]]:
    """Replace math segments and [asy] blocks by placeholders so that sentence splitting never
    cuts inside them."""
    saved: list[str] = []

    def keep(s: str) -> str:
        saved.append(s)
        return _PLACEHOLDER.format(len(saved) - 1)

    pieces = []
    last = 0
    spans = [(m.start(), m.end()) for m in _ASY.finditer(text)]
    spans += [(s.start, s.end) for s in math_spans(text)]
    spans.sort()
    for a, b in spans:
        if a < last:
            continue
        pieces.append(text[last:a])
        pieces.append(keep(text[a:b]))
        last = b
    pieces.append(text[last:])
    return "".join(pieces), saved


def _unmask(text: str, saved: list[str]) -> str:
    return re.sub("\x01(\\d+)\x02", lambda m: saved[int(m.group(1))], text)


def split_sentences(text: str) -> list[str]:
    """Sentences of a problem, each stripped; math segments and abbreviations (`Mr.`, `a.m.`)
    are never split, nor decimals (`1.5`)."""
    masked, saved = _mask_protected(text.strip())
    out: list[str] = []
    start = 0
    for m in _BOUNDARY.finditer(masked):
        before = masked[start : m.start()]
        word = re.search(r"([A-Za-z][A-Za-z.]*)\.$", before.rstrip("\"'”’)]"))
        if word and word.group(1).lower().rstrip(".") in _ABBREVIATIONS:
            continue
        if word and len(word.group(1)) == 1 and word.group(1).isupper():  # initials: "J. K."
            continue
        out.append(masked[start : m.start()] + masked[m.start() : m.end()].rstrip())
        start = m.end()
    out.append(masked[start:])
    return [_unmask(s, saved).strip() for s in out if s.strip()]


_QUESTION_WORDS = re.compile(
    r"\b(?:how|what|which|who|whom|whose|when|where|why|find|compute|calculate|determine|evaluate|"
    r"solve|express|simplify|show|prove|give|list|write|state|estimate|approximate|work out)\b",
    re.IGNORECASE,
)


def has_question(text: str) -> bool:
    """True when text asks something: a `?` or a question/instruction word."""
    return "?" in text or bool(_QUESTION_WORDS.search(text))


def question_sentence_index(sentences: list[str]) -> int | None:
    """Index of the sentence that asks the question: the last one ending with `?`, else the last
    one with a question or instruction word, else None."""
    for k in range(len(sentences) - 1, -1, -1):
        if sentences[k].rstrip("\"'”’) ").endswith("?"):
            return k
    for k in range(len(sentences) - 1, -1, -1):
        if _QUESTION_WORDS.search(sentences[k]):
            return k
    return None


# --- normalized text ---------------------------------------------------------------------------


_NORM_TOKEN = re.compile(r"[a-z0-9]+|[^\sa-z0-9.,;:!?'\"`\u2018\u2019\u201c\u201d\-\u2013\u2014]|(?<=[\s\d(=])-(?=[\s\d(])")


def normalize_text(text: str) -> str:
    """The key for duplicate checks: lower-case words, numbers and math symbols, single-spaced;
    case, spacing, sentence punctuation, quotes and hyphens in words do not count."""
    low = re.sub(r"(?<=\d),(?=\d{3})", "", text.lower())
    return " ".join(_NORM_TOKEN.findall(low))
