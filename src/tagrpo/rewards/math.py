"""`math_reward(completion, answer)`: 1.0 when the completion's final answer equals the gold
answer mathematically, else 0.0. Never raises; bounded in time.

Plain numbers (the bulk of GSM8K) are compared exactly in-process with `fractions.Fraction`.
Anything else goes to math-verify running in a separate worker process; the parent waits at most
`timeout` seconds per check and kills the worker if it hangs (sympy can spin inside C code on
inputs like `9^{9^{9^{9}}}`, where an in-process signal would never fire). A fresh worker starts
on the next call; its import of math-verify is waited for separately (`startup_timeout`), so the
per-check bound stays `timeout` even right after a kill.
"""

from __future__ import annotations

import json
import numbers
import os
import re
import select
import subprocess
import sys
import threading
from fractions import Fraction
from functools import cache

from tagrpo.rewards.extract import MAX_ANSWER_CHARS, extract_final_answer, normalize_gold

_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?:\D|$))")
_NUM = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)")
_FRAC = re.compile(r"^([-+]?)\\[dt]?frac\s*\{\s*([-+]?\d+)\s*\}\s*\{\s*([-+]?\d+)\s*\}$")
_FRAC_SHORT = re.compile(r"^([-+]?)\\[dt]?frac(\d)(\d)$")
_SLASH = re.compile(r"^([-+]?\d+)\s*/\s*([-+]?\d+)$")
_TEXT_UNIT = re.compile(r"\\(?:text|mathrm|textbf|mbox)\s*\{[^{}]*\}")


def _strip_decorations(s: str) -> str:
    s = s.strip()
    s = s.replace("\\$", "").replace("$", "").replace("\\!", "").replace("\\,", "").replace("~", " ")
    s = s.replace("\\%", "").replace("%", "")
    s = _TEXT_UNIT.sub("", s)
    s = s.replace("{,}", "")
    s = _THOUSANDS.sub("", s)
    s = s.strip().rstrip(".").strip()
    return s


def parse_number(s: str) -> Fraction | None:
    """Exact value of a plain number, `a/b` or `\\frac{a}{b}` (units and `$` stripped), else None."""
    s = _strip_decorations(s)
    if not s or len(s) > 64:
        return None
    m = _FRAC.match(s) or _FRAC_SHORT.match(s)
    if m:
        sign, a, b = m.groups()
        if int(b) == 0:
            return None
        v = Fraction(int(a), int(b))
        return -v if sign == "-" else v
    m = _SLASH.match(s)
    if m:
        a, b = m.groups()
        return None if int(b) == 0 else Fraction(int(a), int(b))
    # "18", "18.50", "18 dollars", "18 apples": a leading number followed only by words
    m = _NUM.match(s)
    if m and (m.end() == len(s) or re.fullmatch(r"\s+[A-Za-z][A-Za-z .]*", s[m.end():])):
        try:
            return Fraction(m.group(0))
        except (ValueError, ZeroDivisionError):
            return None
    return None


class MathVerifier:
    """Callable `(completion, answer) -> float` with a hard time bound per symbolic check.

    One worker process (started lazily, restarted after a timeout); thread-safe. `stats` counts
    fast-path decisions, worker checks and timeouts.
    """

    def __init__(self, timeout: float = 5.0, startup_timeout: float = 60.0):
        self.timeout = timeout  # seconds per symbolic check, enforced by killing the worker
        self.startup_timeout = startup_timeout  # seconds for a fresh worker to import math-verify
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self.stats = {"fast": 0, "symbolic": 0, "timeouts": 0, "errors": 0}

    def __call__(self, completion: str, answer: str) -> float:
        try:
            # a gold answer must be text or a number: str(None) == "None" would match \boxed{None}
            if isinstance(answer, bool) or not isinstance(answer, (str, numbers.Number)):
                return 0.0
            pred = extract_final_answer(completion)
            if not pred or len(pred) > MAX_ANSWER_CHARS:
                return 0.0
            gold = normalize_gold(answer)
            if not gold:
                return 0.0
            g, p = parse_number(gold), parse_number(pred)
            if g is not None and p is not None:
                self.stats["fast"] += 1
                return 1.0 if g == p else 0.0
            if _strip_decorations(gold) == _strip_decorations(pred):
                self.stats["fast"] += 1
                return 1.0
            return self._symbolic(gold, pred)
        except Exception:  # noqa: BLE001 - a reward must never raise
            self.stats["errors"] += 1
            return 0.0

    # --- worker process -------------------------------------------------------------------
    def _start(self) -> subprocess.Popen | None:
        """A fresh worker that has finished importing math-verify, or None if it failed to."""
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        proc = subprocess.Popen(
            [sys.executable, "-m", "tagrpo.rewards._worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            text=True,
            bufsize=1,
        )
        self._proc = proc
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], self.startup_timeout)
        line = proc.stdout.readline() if ready else ""
        try:
            ok = bool(json.loads(line).get("ready")) if line else False
        except json.JSONDecodeError:
            ok = False
        if not ok:
            self._kill()
            return None
        return proc

    def _kill(self) -> None:
        if self._proc is not None:
            try:
                self._proc.kill()
                self._proc.wait(timeout=5)
            except Exception:  # noqa: BLE001
                pass
            self._proc = None

    def _symbolic(self, gold: str, pred: str) -> float:
        with self._lock:
            self.stats["symbolic"] += 1
            proc = self._proc
            if proc is None or proc.poll() is not None:
                proc = self._start()
                if proc is None:
                    self.stats["errors"] += 1
                    return 0.0
            assert proc.stdin is not None and proc.stdout is not None
            try:
                proc.stdin.write(json.dumps({"gold": gold, "pred": pred}) + "\n")
                proc.stdin.flush()
            except (BrokenPipeError, OSError):
                self._kill()
                self.stats["errors"] += 1
                return 0.0
            # the worker has already imported math-verify (see _start): the bound is the check only
            ready, _, _ = select.select([proc.stdout], [], [], self.timeout)
            if not ready:
                self.stats["timeouts"] += 1
                self._kill()
                return 0.0
            line = proc.stdout.readline()
            if not line:
                self._kill()
                self.stats["errors"] += 1
                return 0.0
            try:
                return 1.0 if json.loads(line).get("ok") else 0.0
            except json.JSONDecodeError:
                self._kill()
                self.stats["errors"] += 1
                return 0.0

    def close(self) -> None:
        with self._lock:
            self._kill()

    def __del__(self):  # best effort
        try:
            self._kill()
        except Exception:  # noqa: BLE001
            pass


@cache
def default_verifier() -> MathVerifier:
    """The process-wide verifier behind `math_reward` (created on first use)."""
    return MathVerifier()


def math_reward(completion: str, answer: str) -> float:
    """1.0 if the completion's final answer (last \\boxed{...}, else a clear final-answer line)
    equals the gold answer (GSM8K `#### 72`, a MATH solution or plain LaTeX), else 0.0."""
    return default_verifier()(completion, answer)
