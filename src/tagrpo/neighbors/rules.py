"""Rule-based neighbors: offline, deterministic given a seed, problem-equivalent by construction.

TA-GRPO samples responses for N rewordings of each training question (plain GRPO samples only
the original). These rules make rewordings that cannot change the problem, because they only
move, relabel or wrap the original text:

- `reorder`:  the question sentence first, then the givens, each sentence verbatim;
- `format`:   a list of givens and a "Find:" line (a leading "If X, how ...?" becomes a given);
- `rename`:   people's names (to a name of the same group, so pronouns stay right) and
              single-letter LaTeX variables (`$x$`, `$f(x)$`), consistently across the question;
              never units, commands such as `\\sin`, constants `e`/`i`, numbers or `\\text{}`;
- `instruct`: a different instruction wrapper around the unchanged problem.

Every rule neighbor keeps every number and math segment of the original (modulo renaming).
A transformation that does not apply to a question (nothing to rename, a one-sentence question
for `reorder`) returns None rather than a copy of the original.
"""

from __future__ import annotations

import hashlib
import random
import re

from tagrpo.neighbors.names import GROUPS
from tagrpo.neighbors.text import (
    FIXED_LETTERS,
    math_spans,
    math_tokens,
    question_sentence_index,
    split_sentences,
)

RULES_VERSION = "rules-v1"
TRANSFORMATIONS = ("reorder", "format", "rename", "instruct")

FORMAT_STYLES = (("Given:", "Find:"), ("Known facts:", "Find:"), ("Information:", "Question:"))

INSTRUCT_WRAPPERS = (
    "Solve the following problem.\n\n{q}",
    "{q}\n\nWork out the answer carefully.",
    "Here is a math problem for you:\n{q}",
    "Problem: {q}",
    "Read the problem below and answer the question it asks.\n\n{q}",
    "Consider the following situation. {q}",
    "{q}\n\nThink it through and give the result.",
    "Please help with this question.\n{q}",
)

_CONDITIONAL = re.compile(
    r"^(?:If|Since|Given that|Assuming that|Assuming|Suppose that|Suppose)\s+(?P<cond>.+?)"
    r"(?:,\s*(?:then\s+)?|\s+then\s+)"
    r"(?P<q>(?:how|what|which|who|when|where|find|calculate|determine|compute)\b.*)$",
    re.DOTALL,
)
_NAME_INDEX = {name: group for group, names in GROUPS.items() for name in names}
_CAPWORD = re.compile(r"\b[A-Z][a-z]+\b")
# letters never used as replacements (look like digits, or have a fixed meaning)
_AVOID_TARGETS = frozenset("eidloOIDS")


def _cap(s: str) -> str:
    return s[0].upper() + s[1:] if s and s[0].islower() else s


def reorder(question: str) -> str | None:
    """The question sentence first, then the other sentences in their original order."""
    sentences = split_sentences(question)
    k = question_sentence_index(sentences)
    if len(sentences) < 2 or k is None or k == 0:
        return None
    return " ".join([sentences[k]] + sentences[:k] + sentences[k + 1 :])


def format_givens(question: str, style: int = 0) -> str | None:
    """A bulleted list of the givens and a "Find:" line with the question."""
    sentences = split_sentences(question)
    k = question_sentence_index(sentences)
    if k is None:
        return None
    asked = sentences[k]
    extra: list[str] = []
    m = _CONDITIONAL.match(asked)
    if m:
        extra = [_cap(m.group("cond").strip()) + "."]
        asked = _cap(m.group("q").strip())
    givens = sentences[:k] + extra + sentences[k + 1 :]
    if not givens:
        return None
    header, find = FORMAT_STYLES[style % len(FORMAT_STYLES)]
    if find == "Find:" and re.match(r"Find\s+\S", asked):  # "Find: Find x" -> "Find: x"
        asked = asked.split(None, 1)[1]
    return "\n".join([header] + [f"- {g}" for g in givens] + [f"{find} {asked}"])


def instruct(question: str, index: int = 0) -> str:
    """The unchanged question inside instruction wrapper number `index` (mod the count)."""
    return INSTRUCT_WRAPPERS[index % len(INSTRUCT_WRAPPERS)].format(q=question.strip())


def _prose_parts(text: str) -> list[tuple[bool, int, int]]:
    """(is_math, start, end) pieces covering text."""
    parts, last = [], 0
    for s in math_spans(text):
        if s.start > last:
            parts.append((False, last, s.start))
        parts.append((True, s.start, s.end))
        last = s.end
    if last < len(text):
        parts.append((False, last, len(text)))
    return parts


def _letter_plan(text: str, rng: random.Random) -> dict[str, str]:
    """Renaming of single-letter math variables: only letters that are isolated everywhere they
    occur in math and never stand alone in the prose; targets unused anywhere in the text."""
    spans = math_spans(text)
    if not spans or "[asy]" in text:
        return {}
    isolated: set[str] = set()
    blocked: set[str] = set(FIXED_LETTERS)
    present: set[str] = set()
    for s in spans:
        for t in math_tokens(s.content):
            if t.kind == "lit":
                present.update(ch for ch in t.value if ch.isalpha())
                continue
            present.add(t.value)
            (isolated if t.run == 1 else blocked).add(t.value)
    prose = "".join(text[a:b] for is_math, a, b in _prose_parts(text) if not is_math)
    standalone = set(re.findall(r"(?<![A-Za-z\\])([A-Za-z])(?![A-Za-z])", prose))
    present |= standalone
    movable = sorted(isolated - blocked - standalone)
    plan: dict[str, str] = {}
    for letter in movable:
        pool = [c for c in (map(chr, range(97, 123)) if letter.islower() else map(chr, range(65, 91)))
                if c not in present and c not in _AVOID_TARGETS and c not in plan.values()]
        if pool:
            plan[letter] = rng.choice(pool)
    return plan


def _name_plan(text: str, rng: random.Random) -> dict[str, str]:
    prose = "".join(text[a:b] for is_math, a, b in _prose_parts(text) if not is_math)
    found = []
    for m in _CAPWORD.finditer(prose):
        if m.group(0) in _NAME_INDEX and m.group(0) not in found:
            found.append(m.group(0))
    words = {w.lower() for w in re.findall(r"[A-Za-z]+", text)}
    plan: dict[str, str] = {}
    for name in found:
        pool = [c for c in GROUPS[_NAME_INDEX[name]] if c.lower() not in words and c not in plan.values()]
        if pool:
            plan[name] = rng.choice(pool)
    return plan


def rename(question: str, rng: random.Random) -> tuple[str, dict[str, str]] | None:
    """(renamed question, mapping old -> new) or None when there is nothing to rename.

    Names are replaced as whole words in the prose, letters only at variable positions inside
    math segments, so `\\sin x` becomes `\\sin t` and `5\\text{ cm}` stays."""
    names = _name_plan(question, rng)
    letters = _letter_plan(question, rng)
    if not names and not letters:
        return None
    name_re = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b") if names else None
    out = []
    for is_math, a, b in _prose_parts(question):
        piece = question[a:b]
        if not is_math:
            out.append(name_re.sub(lambda m: names[m.group(1)], piece) if name_re else piece)
            continue
        span = next(s for s in math_spans(question) if s.start == a)
        content = span.content
        chars = list(content)
        for t in math_tokens(content):
            if t.kind == "var" and t.run == 1 and t.value in letters:
                chars[t.start] = letters[t.value]
        offset = span.content_start - a
        out.append(piece[:offset] + "".join(chars) + piece[offset + len(content) :])
    return "".join(out), {**names, **letters}


def _rng(seed: int, question: str, transformation: str, sample_index: int) -> random.Random:
    qh = hashlib.sha256(question.encode("utf-8")).hexdigest()[:16]
    return random.Random(f"{seed}|{qh}|{transformation}|{sample_index}")


def transform(question: str, transformation: str, sample_index: int = 0, seed: int = 0) -> str | None:
    """Candidate number `sample_index` of a transformation, or None if it does not apply.

    Sample 0 is the plain transformation; later samples vary it (another draw of names, another
    list style or wrapper) or combine it with a rename, so a question can have more neighbors
    than there are transformations."""
    if transformation not in TRANSFORMATIONS:
        raise ValueError(f"unknown rule transformation {transformation!r}; choose from {', '.join(TRANSFORMATIONS)}")
    rng = _rng(seed, question, transformation, sample_index)
    s = sample_index

    def renamed(text: str | None) -> str | None:
        if text is None:
            return None
        r = rename(text, rng)
        return r[0] if r else None

    if transformation == "reorder":
        base = reorder(question)
        return base if s == 0 else renamed(base)
    if transformation == "format":
        base = format_givens(question, style=s)
        return base if s < len(FORMAT_STYLES) else renamed(base)
    if transformation == "rename":
        r = rename(question, rng)
        return r[0] if r else None
    base = instruct(question, index=s + seed)
    return base if s < len(INSTRUCT_WRAPPERS) else renamed(base)
