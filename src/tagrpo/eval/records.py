"""Raw records of local benchmark and data files (.jsonl, .json, .parquet, .csv), fields untouched,
and the gold-answer text normalization shared by the benchmark loaders. No network."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any

from tagrpo.errors import TagrpoError

LOCAL_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")


def read_records(path: str | os.PathLike) -> list[dict]:
    """Raw records of a .jsonl / .json / .parquet / .csv file, fields untouched."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in LOCAL_SUFFIXES:
        raise TagrpoError(f"{p}: cannot read '{suffix or p.name}' files; use one of {', '.join(LOCAL_SUFFIXES)}")
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such file")
    if suffix == ".jsonl":
        out = []
        with p.open(encoding="utf-8") as f:
            for lineno, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise TagrpoError(f"{p}, line {lineno}: invalid JSON ({e.msg} at column {e.colno})") from None
        return out
    if suffix == ".json":
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise TagrpoError(f"{p}, line {e.lineno}: invalid JSON ({e.msg})") from None
        if isinstance(data, dict):
            data = next((data[k] for k in ("data", "rows", "examples", "test", "train") if isinstance(data.get(k), list)), None)
        if not isinstance(data, list):
            raise TagrpoError(f"{p}: expected a JSON list of objects")
        return data
    if suffix == ".csv":
        with p.open(encoding="utf-8", newline="") as f:
            return list(csv.DictReader(f))
    import pyarrow.parquet as pq

    return pq.read_table(p).to_pylist()


def answer_text(value: Any) -> str:
    """Gold answer as a string: lists (OlympiadBench's final_answer) joined, integral floats as ints."""
    if isinstance(value, (list, tuple)):
        parts = [answer_text(v) for v in value]
        return parts[0] if len(parts) == 1 else ", ".join(parts)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()
