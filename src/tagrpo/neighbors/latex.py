"""LaTeX math in problem text: which `$...$`, `\\(...\\)`, `\\[...\\]` spans are math (and which `$` is
currency), their token structure, and whether a neighbor's segments match the original's up to a
consistent renaming of single-letter variables (a bijection). Used by `text.py` (sentences never
split inside math), the rule transformations and the validator."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

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
