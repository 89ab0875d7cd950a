"""Text analysis shared by the rule transformations and the validator: numbers, LaTeX math
segments, sentences, and normalized text for duplicate checks.

A TA-GRPO neighbor must be the same problem as its original (plain GRPO never rewrites the
question, so it needs none of this). These helpers define what "the same numbers" and "the same
math" mean: numbers are compared by value as a multiset (`1,000` == `1000`, `0.80` == `0.8`,
`five` == `5`), LaTeX segments by their token structure with single-letter variables allowed to
be renamed consistently (a bijection), and `$` is told apart as currency (GSM8K) or math (MATH).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

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


# --- LaTeX math segments -----------------------------------------------------------------------

# commands whose braced argument is text or a fixed symbol, never variables
FIXED_ARG_COMMANDS = frozenset({
    "text", "textrm", "textbf", "textit", "texttt", "textsf", "mathrm", "mbox", "hbox", "operatorname",
    "mathbb", "mathcal", "mathfrak", "mathscr", "unit", "si", "SI", "color", "textcolor", "label",
    "begin", "end", "hspace", "vspace", "phantom", "mathsf", "mathtt", "emph",
})
# single letters that name constants, not variables: never renamed
FIXED_LETTERS = frozenset({"e", "i"})

_MATH_DELIMS = re.compile(r"\\\[(?P<d>.*?)\\\]|\\\((?P<p>.*?)\\\)|\$\$(?P<dd>.*?)\$\$|(?<!\\)\$(?P<s>(?:\\\$|[^$])*?)(?<!\\)\$", re.DOTALL)
_ASY = re.compile(r"\[asy\].*?\[/asy\]", re.DOTALL)
_WORDY = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{2,}\s+[A-Za-z]{2,}(?![A-Za-z])")
_LEADING_NUMBER = re.compile(r"\s*\d[\d,]*(?:\.\d+)?")


@dataclass(frozen=True)
class MathSpan:
    """A math segment: `text[start:end]` is the whole segment, `content` the part inside the
    delimiters, beginning at `content_start`."""

    start: int
    end: int
    content_start: int
    content: str


def _strip_text_groups(content: str) -> str:
    return re.sub(r"\\(?:text|mbox|mathrm|textrm|textbf|textit)\s*\{[^{}]*\}", " ", content)


def _reads_as_money(content: str) -> bool:
    """True for the stretch between two currency signs (`5 and `, `3.00.  He adds `, `5-`),
    False for math (`5`, `2 \\cdot 3`, `x^2+1`)."""
    if "\n" in content or _WORDY.search(_strip_text_groups(content)):
        return True
    m = _LEADING_NUMBER.match(content)
    if not m:
        return False
    rest = content[m.end() :]
    return bool(
        re.match(r"\s+[A-Za-z]{2,}", rest)
        or re.match(r"[,.;:!?](?:\s|$)", rest)
        or re.fullmatch(r"\s*[-\u2013]\s*", rest)
    )


def dollars_are_currency(text: str) -> bool:
    """True when the text's unescaped `$` signs are money (GSM8K style: `$5 and $10`, `20$`),
    False when they delimit math (MATH style: `$x^2$`, money written `\\$5`)."""
    singles = re.findall(r"(?<!\\)\$", text)
    if not singles:
        return False
    if not re.search(r"(?<!\\)\$\s?\.?\d|\d\s?(?<!\\)\$", text):
        return False
    if len(singles) % 2 == 1:
        return True
    return any(m.group("s") is not None and _reads_as_money(m.group("s")) for m in _MATH_DELIMS.finditer(text))


def math_spans(text: str, currency: bool | None = None) -> list[MathSpan]:
    """The math segments of text: `\\[..\\]`, `\\(..\\)`, `$$..$$`, and `$..$` unless the text's
    dollars are currency (`currency=None`: decide from the text itself; the validator passes the
    original's verdict for a neighbor). `[asy]` blocks are not math segments."""
    if currency is None:
        currency = dollars_are_currency(text)
    masked = _ASY.sub(lambda m: " " * len(m.group(0)), text)
    spans = []
    for m in _MATH_DELIMS.finditer(masked):
        for group in ("d", "p", "dd", "s"):
            if m.group(group) is not None:
                break
        if group == "s" and currency:
            continue
        cs = m.start(group)
        spans.append(MathSpan(m.start(), m.end(), cs, text[cs:m.end(group)]))
    return spans


def math_segments(text: str, currency: bool | None = None) -> list[str]:
    """Contents of the math segments of text, in order."""
    return [s.content for s in math_spans(text, currency)]


@dataclass(frozen=True)
class MathToken:
    """One token of a math segment: `kind` is 'var' (a letter that may be renamed), or 'lit'."""

    kind: str
    value: str
    start: int  # offset in the segment content
    run: int  # length of the letter run the letter belongs to (1 for an isolated letter)


def _skip_group(s: str, i: int) -> int:
    """Index just past a balanced {...} group starting at s[i] == '{' (or i if none)."""
    j = i
    while j < len(s) and s[j].isspace():
        j += 1
    if j >= len(s) or s[j] != "{":
        return i
    depth = 0
    while j < len(s):
        if s[j] == "\\":
            j += 2
            continue
        if s[j] == "{":
            depth += 1
        elif s[j] == "}":
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    return len(s)


def math_tokens(content: str) -> list[MathToken]:
    """Tokens of a segment: commands, fixed-argument groups and other characters are literals
    (`lit`); letters are `var` unless they are constants (`e`, `i`). Whitespace is dropped."""
    toks: list[MathToken] = []
    i, n = 0, len(content)
    while i < n:
        ch = content[i]
        if ch.isspace():
            i += 1
            continue
        if ch == "\\":
            m = re.match(r"\\[A-Za-z]+", content[i:])
            if m:
                name = m.group(0)[1:]
                j = i + len(m.group(0))
                if name in FIXED_ARG_COMMANDS:
                    j = _skip_group(content, j)  # for \textcolor{red}{x} only the colour is fixed
                toks.append(MathToken("lit", re.sub(r"\s+", "", content[i:j]), i, 0))
                i = j
            else:
                toks.append(MathToken("lit", content[i : i + 2], i, 0))
                i += 2
            continue
        if ch.isalpha() and ch.isascii():
            j = i
            while j < n and content[j].isalpha() and content[j].isascii():
                j += 1
            run = j - i
            for k in range(i, j):
                kind = "lit" if content[k] in FIXED_LETTERS else "var"
                toks.append(MathToken(kind, content[k], k, run))
            i = j
            continue
        toks.append(MathToken("lit", ch, i, 0))
        i += 1
    return toks


def segment_shape(tokens: list[MathToken]) -> tuple[str, ...]:
    """The segment with every variable replaced by a placeholder (what renaming cannot change)."""
    return tuple("\x00" if t.kind == "var" else t.value for t in tokens)


def match_segments(original: list[str], neighbor: list[str], *, max_steps: int = 20000) -> dict[str, str] | None:
    """A bijective letter renaming that maps the multiset of original segments onto the
    neighbor's (in any order), or None when there is none. Backtracking, bounded by max_steps."""
    if len(original) != len(neighbor):
        return None
    o_toks = [math_tokens(s) for s in original]
    n_toks = [math_tokens(s) for s in neighbor]
    if Counter(map(segment_shape, o_toks)) != Counter(map(segment_shape, n_toks)):
        return None
    n_shapes = [segment_shape(t) for t in n_toks]
    order = sorted(range(len(o_toks)), key=lambda k: -len(o_toks[k]))
    used = [False] * len(n_toks)
    steps = 0

    def extend(fwd: dict, bwd: dict, a: list[MathToken], b: list[MathToken]):
        fwd, bwd = dict(fwd), dict(bwd)
        for x, y in zip(a, b):
            if x.kind != "var":
                continue
            if fwd.setdefault(x.value, y.value) != y.value or bwd.setdefault(y.value, x.value) != x.value:
                return None
        return fwd, bwd

    def solve(pos: int, fwd: dict, bwd: dict):
        nonlocal steps
        if pos == len(order):
            return fwd
        k = order[pos]
        shape = segment_shape(o_toks[k])
        for j in range(len(n_toks)):
            if used[j] or n_shapes[j] != shape:
                continue
            steps += 1
            if steps > max_steps:
                return None
            ext = extend(fwd, bwd, o_toks[k], n_toks[j])
            if ext is None:
                continue
            used[j] = True
            found = solve(pos + 1, *ext)
            used[j] = False
            if found is not None:
                return found
        return None

    return solve(0, {}, {})


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
