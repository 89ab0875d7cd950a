"""Reading run directories for reports: `metrics.jsonl` (one JSON object per step, the keys the
trainer logs), `config.yaml`, and `eval_*.json` (`tagrpo eval` documents).

A report of TA-GRPO vs GRPO overlays runs that only differ by `algorithm`; this module gives
each run a label (run name + algorithm) and per-key series with missing and non-finite values
dropped (diversity, for instance, is only logged every K steps).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tagrpo.errors import TagrpoError


@dataclass
class Run:
    """One run directory, loaded."""

    path: Path
    name: str
    algorithm: str
    steps: list[dict]
    config: dict = field(default_factory=dict)
    evals: list[tuple[str, dict]] = field(default_factory=list)  # (file stem, eval document)
    skipped_lines: int = 0

    @property
    def label(self) -> str:
        return f"{self.name} ({self.algorithm})" if self.algorithm and self.algorithm not in self.name else self.name

    def keys(self) -> set[str]:
        return {k for row in self.steps for k in row}

    def series(self, key: str) -> tuple[list[float], list[float]]:
        """(steps, values) where `key` was logged with a finite number."""
        xs, ys = [], []
        for row in self.steps:
            v = row.get(key)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                continue
            xs.append(float(row.get("step", len(xs) + 1)))
            ys.append(float(v))
        return xs, ys

    def tail_mean(self, key: str, frac: float = 0.1) -> float | None:
        """Mean of `key` over the last `frac` of its logged steps (at least one)."""
        _, ys = self.series(key)
        if not ys:
            return None
        m = max(1, round(len(ys) * frac))
        return sum(ys[-m:]) / m

    def last(self, key: str) -> float | None:
        _, ys = self.series(key)
        return ys[-1] if ys else None

    def variants(self) -> list[int]:
        """Variant indices with a logged reward/variant_i/mean."""
        out = set()
        for k in self.keys():
            parts = k.split("/")
            if len(parts) == 3 and parts[0] == "reward" and parts[1].startswith("variant_") and parts[2] == "mean":
                try:
                    out.add(int(parts[1][len("variant_"):]))
                except ValueError:
                    continue
        return sorted(out)


def eval_sort_key(stem: str) -> tuple:
    """Order eval files as a story: before/base/init first, then by the step number in the name,
    then after/final last (`eval_before`, `eval_step-50`, `eval_after`)."""
    import re

    low = stem.lower()
    if any(w in low for w in ("before", "base", "init", "start", "pre")):
        return (0, 0, low)
    if any(w in low for w in ("after", "final", "end", "post")):
        return (2, 0, low)
    nums = re.findall(r"\d+", low)
    return (1, int(nums[-1]) if nums else 0, low)


def read_metrics(path: Path) -> tuple[list[dict], int]:
    """Rows of metrics.jsonl sorted by step (for a repeated step the last row wins, as after a
    resume), and the number of unreadable lines (a line cut by a kill)."""
    rows: dict[float, dict] = {}
    skipped = 0
    order = 0
    with path.open(encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                skipped += 1
                continue
            if not isinstance(row, dict):
                skipped += 1
                continue
            order += 1
            step = row.get("step", order)
            rows[float(step) if isinstance(step, (int, float)) else float(order)] = row
    return [rows[s] for s in sorted(rows)], skipped


def load_run(path: str | os.PathLike) -> Run:
    """Load a run directory (metrics.jsonl and/or eval_*.json must be present)."""
    from tagrpo.eval.runner import read_document

    p = Path(path)
    if not p.is_dir():
        raise FileNotFoundError(f"{p}: no such run directory")
    metrics = p / "metrics.jsonl"
    steps, skipped = read_metrics(metrics) if metrics.is_file() else ([], 0)
    config: dict[str, Any] = {}
    if (p / "config.yaml").is_file():
        import yaml

        try:
            loaded = yaml.safe_load((p / "config.yaml").read_text(encoding="utf-8"))
            config = loaded if isinstance(loaded, dict) else {}
        except yaml.YAMLError:
            config = {}
    evals = []
    for e in sorted(p.glob("eval_*.json"), key=lambda q: eval_sort_key(q.stem)):
        try:
            evals.append((e.stem, read_document(e)))
        except TagrpoError:
            continue
    if not steps and not evals:
        raise TagrpoError(f"{p}: no metrics.jsonl and no eval_*.json; is this a `tagrpo train` run directory?")
    algorithm = next((str(r["algorithm"]) for r in steps if r.get("algorithm")), None) or str(config.get("algorithm", ""))
    return Run(path=p, name=p.resolve().name, algorithm=algorithm, steps=steps, config=config, evals=evals, skipped_lines=skipped)


def load_runs(paths: list[str | os.PathLike]) -> list[Run]:
    """Load several runs; runs with the same directory name are told apart by their parent."""
    runs = [load_run(p) for p in paths]
    names = [r.name for r in runs]
    for r in runs:
        if names.count(r.name) > 1:
            r.name = f"{r.path.resolve().parent.name}/{r.name}"
    return runs
