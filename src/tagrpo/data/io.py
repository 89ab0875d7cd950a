"""Reading and writing dataset rows: .jsonl, .json and .parquet, normalized to one row shape.

Every stage of TA-GRPO reads the same rows: `{"id", "question", "answer", "neighbors"?}` plus the
original fields of the file, untouched. Plain GRPO only needs (question, answer); TA-GRPO adds
`neighbors` (problem-equivalent rewordings of `question`, built by `tagrpo neighbors`).

Field names understood without flags:
- GSM8K: `question`, `answer` ending in `#### 72` (the full answer text is kept in `answer`;
  pulling out the gold value is `tagrpo.rewards.normalize_gold`'s job).
- MATH: `problem`, and `answer` when present, else `solution` (with a `\\boxed{}` answer).
- or explicit names: `read_rows(path, question_field="prompt", answer_field="target")`.

A row without a usable question or answer either raises `TagrpoError` (the default) or, when
the caller passes a `skipped` list, is left out and described there (`SkippedRow`). Bad JSON
always raises, naming the file and line. `write_rows` writes atomically (temp file in the same
directory, then `os.replace`), so a reader never sees half a file.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tagrpo.errors import TagrpoError

QUESTION_FIELDS = ("question", "problem")
ANSWER_FIELDS = ("answer", "solution")
ID_FIELDS = ("id", "unique_id")
READ_SUFFIXES = (".jsonl", ".json", ".parquet")
WRITE_SUFFIXES = (".jsonl", ".json", ".parquet")


@dataclass(frozen=True)
class SkippedRow:
    """A row left out by `read_rows`: where it is (`path`, 1-based `line` for .jsonl, else the
    1-based record number), which `field` was wrong, and why."""

    path: str
    line: int
    field: str
    reason: str
    unit: str = "line"

    def __str__(self) -> str:
        return f"{self.path}, {self.unit} {self.line}: {self.reason}"


def _suffix(path: Path, allowed: tuple[str, ...], verb: str) -> str:
    suffix = path.suffix.lower()
    if suffix not in allowed:
        raise TagrpoError(f"{path}: cannot {verb} '{suffix or path.name}' files; use one of {', '.join(allowed)}")
    return suffix


def _iter_jsonl(path: Path) -> Iterator[tuple[int, Any]]:
    with path.open("r", encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                yield lineno, json.loads(line)
            except json.JSONDecodeError as e:
                raise TagrpoError(f"{path}, line {lineno}: invalid JSON ({e.msg} at column {e.colno})") from None


def _iter_json(path: Path) -> Iterator[tuple[int, Any]]:
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise TagrpoError(f"{path}, line {e.lineno}: invalid JSON ({e.msg} at column {e.colno})") from None
    if isinstance(data, dict):
        lists = [k for k in ("data", "rows", "examples") if isinstance(data.get(k), list)]
        if not lists:
            raise TagrpoError(f"{path}: expected a JSON list of objects, or an object with a 'data', 'rows' or 'examples' list")
        data = data[lists[0]]
    if not isinstance(data, list):
        raise TagrpoError(f"{path}: expected a JSON list of objects, got {type(data).__name__}")
    yield from enumerate(data, start=1)


def _iter_parquet(path: Path) -> Iterator[tuple[int, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:  # pragma: no cover - pyarrow comes with datasets
        raise TagrpoError("reading .parquet needs pyarrow: pip install pyarrow") from None
    try:
        table = pq.read_table(path)
    except Exception as e:  # noqa: BLE001 - pyarrow raises several types for a bad file
        raise TagrpoError(f"{path}: not a readable parquet file ({e})") from None
    yield from enumerate(table.to_pylist(), start=1)


def _pick(row: dict, explicit: str | None, candidates: tuple[str, ...]) -> tuple[str | None, Any]:
    """(field name, value) of the first usable field: the explicit one, else the first candidate
    that holds a non-empty value."""
    names = (explicit,) if explicit else candidates
    for name in names:
        value = row.get(name)
        if value is None or (isinstance(value, str) and not value.strip()):
            continue
        return name, value
    return None, None


def _normalize(row: Any, index: int, question_field: str | None, answer_field: str | None) -> tuple[dict | None, tuple[str, str] | None]:
    """(normalized row, None) or (None, (field, reason))."""
    if not isinstance(row, dict):
        return None, ("row", f"expected a JSON object, got {type(row).__name__}")
    qname, question = _pick(row, question_field, QUESTION_FIELDS)
    if qname is None:
        wanted = f"'{question_field}'" if question_field else " or ".join(f"'{f}'" for f in QUESTION_FIELDS)
        return None, (question_field or "question", f"no question: field {wanted} missing or empty (use --question-field)")
    if not isinstance(question, str):
        return None, (qname, f"field '{qname}' must be a string, got {type(question).__name__}")
    aname, answer = _pick(row, answer_field, ANSWER_FIELDS)
    if aname is None:
        wanted = f"'{answer_field}'" if answer_field else " or ".join(f"'{f}'" for f in ANSWER_FIELDS)
        return None, (answer_field or "answer", f"no answer: field {wanted} missing or empty (use --answer-field)")
    if isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
        return None, (aname, f"field '{aname}' must be a string or a number, got {type(answer).__name__}")
    neighbors = row.get("neighbors")
    if neighbors is not None and not (isinstance(neighbors, list) and all(isinstance(x, str) for x in neighbors)):
        return None, ("neighbors", "field 'neighbors' must be a list of strings")
    _, rid = _pick(row, None, ID_FIELDS)
    out: dict[str, Any] = {"id": rid if rid is not None else index, "question": question, "answer": str(answer)}
    if neighbors is not None:
        out["neighbors"] = list(neighbors)
    for k, v in row.items():
        if k not in out:
            out[k] = v
    return out, None


def read_rows(
    path: str | os.PathLike,
    question_field: str | None = None,
    answer_field: str | None = None,
    *,
    skipped: list[SkippedRow] | None = None,
) -> list[dict]:
    """Rows of a .jsonl / .json / .parquet file as `{"id", "question", "answer", "neighbors"?, ...}`.

    `id` is the row's own `id` (or `unique_id`) when it has one, else its 0-based position in
    the file. `answer` is the full text of the answer field (a string). With `skipped=None` a
    row without a usable question/answer raises `TagrpoError` naming file, line and field;
    with a list, such rows are appended to it and left out.
    """
    p = Path(path)
    suffix = _suffix(p, READ_SUFFIXES, "read")
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such file")
    records = {".jsonl": _iter_jsonl, ".json": _iter_json, ".parquet": _iter_parquet}[suffix](p)
    unit = "line" if suffix == ".jsonl" else "record"
    rows: list[dict] = []
    for index, (line, record) in enumerate(records):
        row, problem = _normalize(record, index, question_field, answer_field)
        if problem is None:
            rows.append(row)
            continue
        where = SkippedRow(str(p), line, problem[0], problem[1], unit)
        if skipped is None:
            raise TagrpoError(str(where))
        skipped.append(where)
    return rows


def _json_default(value: Any) -> Any:
    if hasattr(value, "tolist"):  # numpy scalars/arrays from parquet
        return value.tolist()
    if isinstance(value, (set, tuple)):
        return list(value)
    raise TypeError(f"cannot write a value of type {type(value).__name__} as JSON")


def _atomic_write(path: Path, write) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_rows(path: str | os.PathLike, rows: Iterable[dict]) -> None:
    """Write rows to .jsonl (one JSON object a line), .json (one list) or .parquet, atomically."""
    p = Path(path)
    suffix = _suffix(p, WRITE_SUFFIXES, "write")
    rows = list(rows)
    if suffix == ".jsonl":
        def write(f):
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False, default=_json_default).encode("utf-8"))
                f.write(b"\n")
    elif suffix == ".json":
        def write(f):
            f.write(json.dumps(rows, ensure_ascii=False, indent=1, default=_json_default).encode("utf-8"))
            f.write(b"\n")
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            table = pa.Table.from_pylist(rows)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
            raise TagrpoError(f"{p}: rows cannot be stored as parquet ({e}); write .jsonl instead") from None

        def write(f):
            pq.write_table(table, f)
    _atomic_write(p, write)
