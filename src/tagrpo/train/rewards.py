"""Reward plug-ins: a callable named by dotted path (`module:function` or `module.function`),
called as fn(completion, answer) -> float. The default, `tagrpo.rewards:math_reward`, bounds its
own time (a worker process killed on timeout). Other plug-ins run in a thread with a time limit:
a completion whose reward does not return in `timeout` seconds scores 0.0 and is counted."""

from __future__ import annotations

import importlib
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from tagrpo.errors import TagrpoError


def load_callable(path: str):
    mod_name, sep, attr = path.partition(":")
    if not sep:
        mod_name, _, attr = path.rpartition(".")
    if not mod_name or not attr:
        raise TagrpoError(f"reward {path!r}: expected 'package.module:function'")
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as e:
        raise TagrpoError(f"reward {path!r}: cannot import module {mod_name!r}: {e}") from None
    fn = getattr(mod, attr, None)
    if not callable(fn):
        raise TagrpoError(f"reward {path!r}: {mod_name} has no callable {attr!r}")
    return fn


class RewardRunner:
    def __init__(self, path: str, timeout: float = 10.0):
        self.fn = load_callable(path)
        self.bounded = path.replace(":", ".") in ("tagrpo.rewards.math_reward", "tagrpo.rewards.math.math_reward")
        self.timeout = timeout
        self.timeouts = 0
        self._pool: ThreadPoolExecutor | None = None

    def score(self, completions: list[str], answers: list[str]) -> list[float]:
        if self.bounded:
            return [float(self.fn(c, a)) for c, a in zip(completions, answers)]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="reward")
        out = []
        for c, a in zip(completions, answers):
            fut = self._pool.submit(self.fn, c, a)
            try:
                out.append(float(fut.result(timeout=self.timeout)))  # NaN / inf: scored 0 and counted by the caller
            except FutureTimeout:
                self.timeouts += 1
                out.append(0.0)
                # the hung thread cannot be killed; start a fresh pool so later calls are not queued behind it
                self._pool.shutdown(wait=False, cancel_futures=True)
                self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="reward")
            except Exception:  # noqa: BLE001 - a broken reward scores 0, the run goes on
                out.append(0.0)
        return out
