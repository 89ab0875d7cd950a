"""Eval documents and tables: the JSON `tagrpo eval --output` writes (and `tagrpo report` and the
trainer read), read back in any of the shapes we write, and the side-by-side rich table (one
column per model, the difference to the first in brackets)."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tagrpo.errors import TagrpoError

EVAL_FORMAT = "tagrpo-eval/1"


# --- documents (what `tagrpo eval --output` writes, what `tagrpo report` reads) ------------
def make_document(models: Sequence[dict], settings: dict) -> dict:
    """The JSON written by `tagrpo eval`: `{"format", "created", "settings", "models": [{"name",
    "path", "benchmarks": {label: result}}]}`. The trainer can write the same with one model."""
    return {
        "format": EVAL_FORMAT,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "settings": dict(settings),
        "models": list(models),
    }


def write_document(path: str | os.PathLike, doc: dict) -> Path:
    """Write atomically (NaN written as null)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp")
    tmp.write_text(json.dumps(_nan_to_none(doc), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, p)
    return p


def _nan_to_none(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _nan_to_none(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_nan_to_none(v) for v in x]
    return x


def read_document(path: str | os.PathLike) -> dict:
    """Read an eval JSON in any of the shapes we write: a full document (`models`), one model
    (`benchmarks`), or one bare benchmark result (`pass@k`); returns a full document."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise TagrpoError(f"{p}, line {e.lineno}: invalid JSON ({e.msg})") from None
    if not isinstance(data, dict):
        raise TagrpoError(f"{p}: expected a JSON object (tagrpo eval output)")
    if isinstance(data.get("models"), list):
        return data
    if isinstance(data.get("benchmarks"), dict):
        return make_document([{"name": data.get("name", data.get("model", p.stem)), **data}], data.get("settings", {}))
    if isinstance(data.get("pass@k"), dict):
        return make_document([{"name": data.get("model", p.stem), "benchmarks": {data.get("benchmark", p.stem): data}}], {})
    raise TagrpoError(f"{p}: not a tagrpo eval result (no 'models', 'benchmarks' or 'pass@k' field)")


# --- tables --------------------------------------------------------------------------------
def _metric_rows(result: dict) -> list[tuple[str, float | None, str]]:
    """(label, value, format) of the headline metrics of one benchmark result; format 'pct' or 'num'."""
    rows = [(f"pass@{k}", v, "pct") for k, v in result["pass@k"].items()]
    if "greedy_accuracy" in result:
        rows.append(("greedy acc", result["greedy_accuracy"], "pct"))
    rows.append(("diversity", result.get("diversity"), "div"))
    rows.append(("mean length", result.get("mean_response_length"), "len"))
    rows.append(("truncated", result.get("truncation_rate"), "pct"))
    return rows


def _fmt(value: float | None, kind: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return {"pct": f"{100 * value:.1f}", "div": f"{value:.3f}", "len": f"{value:.0f}"}[kind]


def _fmt_delta(delta: float, kind: str) -> str:
    s = {"pct": f"{100 * delta:+.1f}", "div": f"{delta:+.3f}", "len": f"{delta:+.0f}"}[kind]
    if kind == "len" or abs(delta) < 1e-12:
        return f"[dim]({s})[/dim]"
    return f"[green]({s})[/green]" if delta > 0 else f"[red]({s})[/red]"


def results_table(doc: dict):
    """A rich Table of an eval document: one column per model (the difference to the first model
    in brackets), one block of rows per benchmark. pass@k, greedy and truncation in percent."""
    from rich.table import Table

    models = doc["models"]
    title = "tagrpo eval"
    s = doc.get("settings") or {}
    if s:
        title += f"  (n={s.get('n')}, T={s.get('temperature')}, top-p={s.get('top_p')}, max {s.get('max_new_tokens')} tokens, seed {s.get('seed')})"
        extra = [f"preset {s['preset']}"] if s.get("preset") else []
        if s.get("chat_template") is False:
            extra.append("raw-text prompt")
        if extra:
            title += "  " + ", ".join(extra)
    table = Table(title=title, title_justify="left", show_lines=False)
    table.add_column("benchmark", style="bold")
    table.add_column("questions", justify="right")
    table.add_column("metric")
    for i, m in enumerate(models):
        table.add_column(m["name"] + ("" if i == 0 else " (Δ)"), justify="right")
    labels = list(dict.fromkeys(b for m in models for b in m["benchmarks"]))
    for bi, label in enumerate(labels):
        base = models[0]["benchmarks"].get(label)
        ref = base or next(m["benchmarks"][label] for m in models if label in m["benchmarks"])
        metric_rows = _metric_rows(ref)
        for ri, (metric, _, kind) in enumerate(metric_rows):
            cells = []
            base_val = {r[0]: r[1] for r in _metric_rows(base)}.get(metric) if base else None
            for mi, m in enumerate(models):
                res = m["benchmarks"].get(label)
                val = {r[0]: r[1] for r in _metric_rows(res)}.get(metric) if res else None
                cell = _fmt(val, kind)
                if mi > 0 and val is not None and base_val is not None and not (
                        isinstance(val, float) and math.isnan(val)) and not (isinstance(base_val, float) and math.isnan(base_val)):
                    cell += " " + _fmt_delta(val - base_val, kind)
                cells.append(cell)
            table.add_row(label if ri == 0 else "", str(ref["n_questions"]) if ri == 0 else "", metric, *cells,
                          end_section=ri == len(metric_rows) - 1 and bi < len(labels) - 1)
    table.caption = "pass@k, greedy accuracy and truncated in %; diversity = mean pairwise cosine distance; length in tokens"
    return table
