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
# Brace tokens for the one-pass matcher: an escaped char (skipped, so \{ and \} do not count)
# or a bare brace.
_BRACE_TOKEN = re.compile(r"\\.|[{}]", re.DOTALL)
# Whitespace runs are bounded ({0,8}) so that no pattern backtracks over a long run of blanks:
# with `\s*` a completion of 100 KB of newlines took minutes (quadratic); now every scan is linear.
_FINAL_PATTERNS = [
    re.compile(r"final answer\s{0,8}(?:is|:|=)?[\s:]{0,8}(?P<a>[^\n]+)", re.IGNORECASE),
    re.compile(r"(?:^|\n)[ \t]{0,8}\**answer\**[ \t]{0,8}[:=][ \t]{0,8}(?P<a>[^\n]+)", re.IGNORECASE),
    re.compile(r"the answer is\s{0,8}:?\s{0,8}(?P<a>[^\n]+)", re.IGNORECASE),
    re.compile(r"####[ \t]{0,8}(?P<a>[^\n]+)"),
]


def _matching_braces(text: str, start: int) -> dict[int, int]:
    """Position of each opening brace at or after `start` -> position of its closing brace, in
    one linear pass (escaped characters such as \\{ are skipped). Unclosed braces are absent."""
    stack: list[int] = []
    match: dict[int, int] = {}
    for m in _BRACE_TOKEN.finditer(text, start):
        ch = m.group(0)
        if ch == "{":
            stack.append(m.start())
        elif ch == "}" and stack:
            match[stack.pop()] = m.start()
    return match


def extract_boxed(text: str) -> str | None:
    """Content of the last complete \\boxed{...} in text, or None. Linear in len(text): the
    braces are matched once for the whole text, not once per \\boxed (which was quadratic on
    inputs such as 20,000 unclosed `\\boxed{`)."""
    text = text[-MAX_COMPLETION_CHARS:]
    opens = [m.end() - 1 for m in _BOXED.finditer(text)]  # index of each box's "{"
    if not opens:
        return None
    match = _matching_braces(text, opens[0])
    for o in reversed(opens):
        close = match.get(o)
        if close is not None:
            return text[o + 1 : close].strip()
    return None


def _clean(ans: str) -> str:
    ans = ans.strip()
    ans = ans.strip("*").strip()
    ans = ans.rstrip(".").rstrip()  # "$\frac{1}{2}$." -> "$\frac{1}{2}$" before the $ check
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
