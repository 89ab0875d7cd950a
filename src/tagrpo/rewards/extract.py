"""Pull the final answer out of a completion, and the gold answer out of a dataset's answer field.

Completion: the last `\\boxed{...}` (nested braces balanced), else the last clear final-answer
line ("The final answer is 12", "Answer: 12", "#### 12"). Gold: GSM8K's `#### 1,234`, a MATH
solution's last `\\boxed{}`, or the raw string. All scans are linear; inputs are length-capped.
"""

from __future__ import annotations

import re

MAX_COMPLETION_CHARS = 200_000
MAX_ANSWER_CHARS = 400

_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_FINAL_PATTERNS = [
    re.compile(r"final answer\s*(?:is|:|=)?\s*[:\s]*(?P<a>[^\n]+)", re.IGNORECASE),
    re.compile(r"(?:^|\n)\s*\**answer\**\s*[:=]\s*(?P<a>[^\n]+)", re.IGNORECASE),
    re.compile(r"the answer is\s*:?\s*(?P<a>[^\n]+)", re.IGNORECASE),
    re.compile(r"####\s*(?P<a>[^\n]+)"),
]


def _balanced(text: str, start: int) -> str | None:
    """Content from text[start] (just after an opening brace) to its matching close brace."""
    depth = 1
    i = start
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "\\" and i + 1 < n:  # skip escaped char such as \{ or \}
            i += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[start:i]
        i += 1
    return None


def extract_boxed(text: str) -> str | None:
    """Content of the last complete \\boxed{...} in text, or None."""
    text = text[-MAX_COMPLETION_CHARS:]
    starts = [m.end() for m in _BOXED.finditer(text)]
    for s in reversed(starts):
        content = _balanced(text, s)
        if content is not None:
            return content.strip()
    return None


def _clean(ans: str) -> str:
    ans = ans.strip()
    ans = ans.strip("*").strip()
    # strip one level of $...$ or \( \)
    if ans.startswith("$") and ans.endswith("$") and len(ans) > 1:
        ans = ans.strip("$").strip()
    if ans.startswith("\\(") and ans.endswith("\\)"):
        ans = ans[2:-2].strip()
    ans = ans.rstrip(".").rstrip()
    return ans


def extract_final_answer(text: str) -> str | None:
    """The completion's final answer: last \\boxed{}, else the last final-answer line."""
    if not isinstance(text, str) or not text:
        return None
    boxed = extract_boxed(text)
    if boxed is not None:
        return boxed
    tail = text[-MAX_COMPLETION_CHARS:]
    best: tuple[int, str] | None = None
    for pat in _FINAL_PATTERNS:
        for m in pat.finditer(tail):
            if best is None or m.start() >= best[0]:
                best = (m.start(), m.group("a"))
    if best is None:
        return None
    ans = best[1]
    inner = extract_boxed(ans)
    return _clean(inner if inner is not None else ans) or None


def normalize_gold(answer: str) -> str:
    """Gold answer string from a dataset field: GSM8K `... #### 1,234` -> `1234`; a MATH
    solution -> its last boxed content; anything else stripped."""
    if not isinstance(answer, str):
        answer = str(answer)
    if "####" in answer:
        tail = answer.rsplit("####", 1)[1].strip()
        return tail.replace(",", "").strip()
    boxed = extract_boxed(answer)
    if boxed is not None:
        return boxed
    return _clean(answer)
