"""Benchmark registry and loaders: the math benchmarks the TA-GRPO paper reports pass@k on
(MATH500, AIME24/25, AMC23, OlympiadBench, Minerva, GPQA-Diamond) plus GSM8K, each mapped to
its Hugging Face dataset and field layout, and normalized to evaluation rows.

Nothing here differs between GRPO and TA-GRPO: every model (base, GRPO, TA-GRPO) is evaluated on
the same rows with the same prompt, so only the policy changes between columns of a table.

Evaluation row: `{"id", "question", "answer", "kind", "benchmark", ...}`. `question` is the text
put into the prompt template, `answer` the gold answer handed to the scorer, `kind` picks the
scorer and template: "math" (`tagrpo.rewards.math_reward` on the final `\\boxed{}`) or
"choice" (multiple choice: the letter in the final `\\boxed{}` against the gold letter).

Prompt formats (the user turn, wrapped by each model's chat template; the same for every model):

- math  (all but GPQA): `{question}` + newline +
  `Please reason step by step, and put your final answer within \\boxed{}.`
  (`tagrpo.rollout.DEFAULT_PROMPT_TEMPLATE`).
- choice (GPQA-Diamond): `{question}` + blank line + the options as `A) ...` to `D) ...` + newline +
  `Please reason step by step, and put the letter of the correct option (A, B, C or D) within \\boxed{}.`
  The order of the four options is a seeded shuffle per question (`random.Random(f"{seed}:{record id}")`),
  so it is identical across models and runs with the same `--seed`.

Sources: loaded with `datasets.load_dataset(hf_id, config, split=...)` when online, or from a local
file with the same fields (`DATA_DIR/<name>.{jsonl,json,parquet,csv}`, e.g. `gsm8k.jsonl`,
`gpqa-diamond.csv`; the alternative stems in `local_names` work too) with `--data-dir`.
"""

from __future__ import annotations

import csv
import json
import os
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tagrpo.errors import TagrpoError
from tagrpo.rewards.extract import extract_final_answer
from tagrpo.rollout.prompts import DEFAULT_PROMPT_TEMPLATE

MATH_TEMPLATE = DEFAULT_PROMPT_TEMPLATE  # tagrpo.rollout's default user-turn template
CHOICE_TEMPLATE = (
    "{question}\nPlease reason step by step, and put the letter of the correct option "
    "(A, B, C or D) within \\boxed{{}}."
)
PROMPT_TEMPLATES = {"math": MATH_TEMPLATE, "choice": CHOICE_TEMPLATE}
LETTERS = "ABCD"
LOCAL_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")
GPQA_FIELDS = ("Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3")


@dataclass(frozen=True)
class Benchmark:
    """One benchmark: where it lives on the hub and which fields hold question, answer and id."""

    name: str
    hf_id: str
    split: str
    question_field: str
    answer_field: str
    config: str | None = None
    id_field: str | None = None
    kind: str = "math"
    description: str = ""
    local_names: tuple[str, ...] = field(default_factory=tuple)


BENCHMARKS: dict[str, Benchmark] = {
    b.name: b
    for b in (
        Benchmark("gsm8k", "openai/gsm8k", "test", "question", "answer", config="main",
                  description="GSM8K test (1,319 grade-school word problems; gold after '####')", local_names=("gsm8k_test",)),
        Benchmark("math500", "HuggingFaceH4/MATH-500", "test", "problem", "answer", id_field="unique_id",
                  description="MATH-500 (500 MATH test problems, PRM800K split)", local_names=("MATH-500", "math-500")),
        Benchmark("aime24", "HuggingFaceH4/aime_2024", "train", "problem", "answer", id_field="id",
                  description="AIME 2024 I and II (30 problems, integer answers)", local_names=("aime_2024", "aime2024")),
        Benchmark("aime25", "math-ai/aime25", "test", "problem", "answer", id_field="id",
                  description="AIME 2025 I and II (30 problems, integer answers)", local_names=("aime_2025", "aime2025")),
        Benchmark("amc23", "math-ai/amc23", "test", "question", "answer", id_field="id",
                  description="AMC 2023 (40 problems)", local_names=("amc_2023", "amc2023")),
        Benchmark("olympiadbench", "Hothan/OlympiadBench", "train", "question", "final_answer",
                  config="OE_TO_maths_en_COMP", id_field="id",
                  description="OlympiadBench, open-ended text-only English maths (674 problems; final_answer is a list)",
                  local_names=("OlympiadBench", "OE_TO_maths_en_COMP")),
        Benchmark("minerva", "math-ai/minervamath", "test", "question", "answer",
                  description="Minerva Math (272 undergraduate STEM problems)", local_names=("minervamath", "minerva_math")),
        Benchmark("gpqa-diamond", "Idavidrein/gpqa", "train", "Question", "Correct Answer", config="gpqa_diamond",
                  id_field="Record ID", kind="choice",
                  description="GPQA-Diamond (198 graduate science questions, 4 options, gated on the hub)",
                  local_names=("gpqa_diamond", "gpqa-diamond", "gpqa")),
    )
}


def benchmark_names() -> list[str]:
    return list(BENCHMARKS)


def get_benchmark(name: str) -> Benchmark:
    key = name.strip().lower()
    if key not in BENCHMARKS:
        raise TagrpoError(f"unknown benchmark {name!r}; choose one of {', '.join(BENCHMARKS)} (or pass a .jsonl/.parquet file)")
    return BENCHMARKS[key]


# --- raw records ---------------------------------------------------------------------------
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


def _answer_text(value: Any) -> str:
    """Gold answer as a string: lists (OlympiadBench's final_answer) joined, integral floats as ints."""
    if isinstance(value, (list, tuple)):
        parts = [_answer_text(v) for v in value]
        return parts[0] if len(parts) == 1 else ", ".join(parts)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


def gpqa_options(record: dict, seed: int, key: str) -> tuple[list[str], str]:
    """(the four options in shuffled order, letter of the correct one). The shuffle is seeded by
    `f"{seed}:{key}"` (string seeds are stable across processes), the same for every model."""
    options = [str(record[f]).strip() for f in GPQA_FIELDS[1:]]  # correct first
    order = list(range(4))
    random.Random(f"{seed}:{key}").shuffle(order)
    shuffled = [options[i] for i in order]
    return shuffled, LETTERS[order.index(0)]


def _normalize(records: list[dict], bench: Benchmark, source: str, seed: int) -> list[dict]:
    rows = []
    for i, rec in enumerate(records):
        where = f"{source}, record {i + 1}"
        if not isinstance(rec, dict):
            raise TagrpoError(f"{where}: expected an object with fields {bench.question_field!r} and {bench.answer_field!r}")
        missing = [f for f in ((bench.question_field, bench.answer_field) if bench.kind == "math" else GPQA_FIELDS)
                   if rec.get(f) in (None, "", [])]
        if missing:
            raise TagrpoError(
                f"{where}: field {missing[0]!r} missing or empty; the {bench.name} layout needs "
                f"{', '.join(repr(f) for f in ((bench.question_field, bench.answer_field) if bench.kind == 'math' else GPQA_FIELDS))}"
            )
        rid = rec.get(bench.id_field) if bench.id_field else None
        rid = rid if rid not in (None, "") else i
        question = str(rec[bench.question_field]).strip()
        row: dict[str, Any] = {"id": rid, "benchmark": bench.name, "kind": bench.kind}
        if bench.kind == "choice":
            options, letter = gpqa_options(rec, seed, str(rid))
            row["question"] = question + "\n\n" + "\n".join(f"{LETTERS[j]}) {o}" for j, o in enumerate(options))
            row["answer"] = letter
            row["choices"] = options
        else:
            context = rec.get("context") if bench.name == "olympiadbench" else None
            row["question"] = f"{str(context).strip()}\n{question}" if context else question
            row["answer"] = _answer_text(rec[bench.answer_field])
        rows.append(row)
    return rows


def _local_file(bench: Benchmark, data_dir: Path) -> Path | None:
    for stem in (bench.name, *bench.local_names):
        for suffix in LOCAL_SUFFIXES:
            p = data_dir / f"{stem}{suffix}"
            if p.is_file():
                return p
    return None


def _from_hub(bench: Benchmark, loader: Callable | None = None) -> list[dict]:
    try:
        if loader is None:
            from datasets import load_dataset as loader
        ds = loader(bench.hf_id, bench.config, split=bench.split)
    except Exception as e:  # noqa: BLE001 - offline, gated, renamed: all end in the same advice
        raise TagrpoError(
            f"could not load benchmark {bench.name!r} from Hugging Face ({bench.hf_id}"
            f"{', ' + bench.config if bench.config else ''}, split {bench.split}): {type(e).__name__}: {str(e)[:200]}. "
            f"Offline? Save it as {bench.name}.jsonl (fields {bench.question_field!r}, {bench.answer_field!r}) "
            f"in a directory and pass --data-dir DIR."
        ) from None
    return [dict(r) for r in ds]


def load_benchmark(name: str, data_dir: str | os.PathLike | None = None, *, seed: int = 0,
                   limit: int | None = None, hub_loader: Callable | None = None) -> list[dict]:
    """Evaluation rows of a registered benchmark: from `data_dir` when it holds a file for it,
    else from the Hugging Face hub with `datasets`. `limit` keeps the first rows."""
    bench = get_benchmark(name)
    path = _local_file(bench, Path(data_dir)) if data_dir is not None else None
    if path is not None:
        records, source = read_records(path), str(path)
    else:
        records, source = _from_hub(bench, hub_loader), bench.hf_id
    if limit is not None:
        records = records[:limit]
    return _normalize(records, bench, source, seed)


def _looks_like_gpqa(rec: Any) -> bool:
    return isinstance(rec, dict) and all(f in rec for f in GPQA_FIELDS)


def load_file(path: str | os.PathLike, *, seed: int = 0, limit: int | None = None,
              question_field: str | None = None, answer_field: str | None = None) -> list[dict]:
    """Evaluation rows of a data file: GPQA layout (lettered options, seeded shuffle) when it has
    GPQA's fields, else the project's row reader (GSM8K / MATH / explicit field names)."""
    p = Path(path)
    records = read_records(p)
    if records and _looks_like_gpqa(records[0]) and not question_field:
        rows = _normalize(records[:limit] if limit is not None else records, BENCHMARKS["gpqa-diamond"], str(p), seed)
        for r in rows:
            r["benchmark"] = p.stem
        return rows
    if p.suffix.lower() == ".csv":
        raise TagrpoError(f"{p}: .csv is read only in the GPQA layout (fields {', '.join(GPQA_FIELDS)}); use .jsonl or .parquet")
    from tagrpo.data.io import read_rows

    rows = read_rows(p, question_field or None, answer_field or None)
    if limit is not None:
        rows = rows[:limit]
    for r in rows:
        r.setdefault("kind", "math")
        r["benchmark"] = p.stem
        r["answer"] = _answer_text(r["answer"])
    return rows


def load_eval_data(data: str, data_dir: str | os.PathLike | None = None, *, seed: int = 0,
                   limit: int | None = None, question_field: str | None = None,
                   answer_field: str | None = None, hub_loader: Callable | None = None) -> tuple[str, list[dict]]:
    """(benchmark label, rows) for `--data`: an existing file, else a registered benchmark name."""
    p = Path(data).expanduser()
    if p.is_file():
        rows = load_file(p, seed=seed, limit=limit, question_field=question_field, answer_field=answer_field)
        label = p.stem
    elif data.strip().lower() in BENCHMARKS:
        rows = load_benchmark(data, data_dir, seed=seed, limit=limit, hub_loader=hub_loader)
        label = data.strip().lower()
    elif p.suffix.lower() in LOCAL_SUFFIXES:
        raise FileNotFoundError(f"--data {data}: no such file")
    else:
        raise TagrpoError(f"--data {data!r} is neither a file nor a benchmark; benchmarks: {', '.join(BENCHMARKS)}")
    if not rows:
        raise TagrpoError(f"--data {data}: no questions to evaluate")
    return label, rows


# --- scoring -------------------------------------------------------------------------------
_LETTER_PATTERNS = (
    re.compile(r"^\(?([A-D])\)?(?:$|[\s.:)\]])"),  # "C", "(C)", "C)", "C. 42", "C: ..."
    re.compile(r"^\(?([a-d])\)?$"),  # a lone lower-case letter ("a pair" is not an option)
    re.compile(r"^(?:option|choice|answer)\s*:?\s*\(?([A-D])\)?(?:$|[\s.:)])", re.IGNORECASE),
)
_LATEX_WRAP = re.compile(r"\\(?:text|textbf|mathrm|mathbf)\s*\{([^{}]*)\}")


def choice_letter(completion: str) -> str | None:
    """The option letter (A-D) of a completion's final answer (last `\\boxed{}`, else a final-answer
    line), or None. `\\boxed{C}`, `\\boxed{(C)}`, `\\boxed{\\text{C}}`, `\\boxed{C) 42}` all give "C"."""
    pred = extract_final_answer(completion)
    if pred is None:
        return None
    pred = _LATEX_WRAP.sub(r"\1", pred).strip().strip("$").strip()
    for pat in _LETTER_PATTERNS:
        m = pat.match(pred)
        if m:
            return m.group(1).upper()
    return None


def choice_reward(completion: str, answer: str) -> float:
    """1.0 when the completion's final letter equals the gold letter, else 0.0. Never raises."""
    try:
        letter = choice_letter(completion)
        return 1.0 if letter is not None and letter == str(answer).strip().upper() else 0.0
    except Exception:  # noqa: BLE001 - a reward must never raise
        return 0.0


def scorer_for(kind: str) -> Callable[[str, str], float]:
    """The reward for a row kind: "math" -> tagrpo.rewards.math_reward, "choice" -> choice_reward."""
    if kind == "math":
        from tagrpo.rewards import math_reward

        return math_reward
    if kind == "choice":
        return choice_reward
    raise TagrpoError(f"unknown row kind {kind!r}; choose one of math, choice")
