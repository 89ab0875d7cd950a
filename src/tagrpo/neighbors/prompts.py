"""Versioned prompt templates for LLM neighbors (paraphrase, rename, format) and --verify-solve.

The paper had GPT-4-Turbo make TA-GRPO's neighbors with these three kinds of transformation;
plain GRPO needs no prompts at all. Each template's `version` joins the SQLite cache key, and it
includes a hash of the template text, so editing a prompt can never silently reuse answers
produced by the old one. Bump `revision` when the meaning changes on purpose.

The problem is passed between `<problem>` tags; the model is told to answer with the rewritten
problem only. `clean_response` strips the usual wrapping (code fences, "Rewritten problem:",
quotes, echoed tags) from a reply.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

_COMMON_RULES = (
    "Rules:\n"
    "- Keep the meaning and the answer exactly the same.\n"
    "- Keep every number exactly as written, and do not add any new number.\n"
    "- Keep every mathematical expression (LaTeX between $...$) unchanged, apart from any renaming asked for.\n"
    "- Do not solve the problem, do not give hints, and do not state the answer.\n"
    "- Reply with the rewritten problem only, without any introduction or comment."
)


@dataclass(frozen=True)
class Template:
    """A chat prompt: `system` and `user` (with `{question}`), named and versioned."""

    name: str
    revision: int
    system: str
    user: str

    @property
    def version(self) -> str:
        digest = hashlib.sha256(f"{self.system}\x00{self.user}".encode()).hexdigest()[:8]
        return f"{self.name}-v{self.revision}-{digest}"

    def messages(self, question: str) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": self.system},
            {"role": "user", "content": self.user.format(question=question.strip())},
        ]


PARAPHRASE = Template(
    name="paraphrase",
    revision=1,
    system="You rewrite math word problems without changing the problem. " + _COMMON_RULES,
    user=(
        "Paraphrase the following math problem: use different wording and sentence structure, "
        "but keep the same problem.\n\n<problem>\n{question}\n</problem>"
    ),
)

RENAME = Template(
    name="rename",
    revision=1,
    system="You rewrite math word problems without changing the problem. " + _COMMON_RULES,
    user=(
        "Rewrite the following math problem with different names: rename the people, and rename "
        "the single-letter variables consistently (the same new letter everywhere the old one "
        "appears). Keep units, function names such as \\sin, and all numbers unchanged.\n\n"
        "<problem>\n{question}\n</problem>"
    ),
)

FORMAT = Template(
    name="format",
    revision=1,
    system="You rewrite math word problems without changing the problem. " + _COMMON_RULES,
    user=(
        "Restate the following math problem in a different format: a short list of the given "
        "facts, followed by a line that starts with \"Find:\" and says what is asked.\n\n"
        "<problem>\n{question}\n</problem>"
    ),
)

SOLVE = Template(
    name="solve",
    revision=1,
    system="You are a careful mathematician.",
    user=(
        "Solve the following problem. Reason step by step, and put your final answer within "
        "\\boxed{{}}.\n\n<problem>\n{question}\n</problem>"
    ),
)

TEMPLATES = {t.name: t for t in (PARAPHRASE, RENAME, FORMAT)}
LLM_TRANSFORMATIONS = tuple(TEMPLATES)

_FENCE = re.compile(r"^```[a-zA-Z]*\n(?P<body>.*?)\n```$", re.DOTALL)
_LABEL = re.compile(
    r"^(?:here(?:'s| is) (?:the |a |my )?(?:rewritten|paraphrased|restated|reworded|renamed|reformatted)[^\n:]*:|"
    r"(?:rewritten|paraphrased|restated|reworded|renamed|reformatted|new) (?:problem|question|version)\s*:)\s*",
    re.IGNORECASE,
)


_INTRO_LINE = re.compile(
    r"^[^\n]{0,120}\b(?:here|sure|certainly|rewritten|paraphras\w*|restat\w*|reword\w*|renamed|reformatted|version)\b[^\n]{0,120}:\s*\n",
    re.IGNORECASE,
)
_OUTRO = re.compile(r"\n\s*\n[^\n]*\b(?:let me know|hope this helps|feel free)\b[^\n]*$", re.IGNORECASE)


def clean_response(text: str | None) -> str:
    """The rewritten problem inside a model reply: fences, labels, an introduction line
    ("Sure! Here is the paraphrased problem:"), a closing remark, tags and quotes removed."""
    if not text:
        return ""
    s = text.strip()
    m = _FENCE.match(s)
    if m:
        s = m.group("body").strip()
    s = _INTRO_LINE.sub("", s, count=1).strip()
    s = _OUTRO.sub("", s).strip()
    m = _FENCE.match(s)
    if m:
        s = m.group("body").strip()
    s = _LABEL.sub("", s, count=1).strip()
    m = re.search(r"<problem>\s*(?P<body>.*?)\s*(?:</problem>|$)", s, re.DOTALL)
    if m:
        s = m.group("body").strip()
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "\"'" and s.count(s[0]) == 2:
        s = s[1:-1].strip()
    return s
