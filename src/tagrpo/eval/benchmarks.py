"""Benchmark registry and loaders: the math benchmarks the TA-GRPO paper reports pass@k on
(MATH500, AIME24/25, AMC23, AMC12, OlympiadBench, Minerva, GPQA-Diamond) plus GSM8K, each mapped
to its Hugging Face dataset and field layout, and normalized to evaluation rows. File reading is
in `tagrpo.eval.records`, the scorers in `tagrpo.eval.scoring` (both re-exported here).

Nothing here differs between GRPO and TA-GRPO: every model (base, GRPO, TA-GRPO) is evaluated on
the same rows with the same prompt, so only the policy changes between columns of a table.

Evaluation row: `{"id", "question", "answer", "kind", "benchmark", ...}`. `question` is the text
put into the prompt template, `answer` the gold answer handed to the scorer, `kind` picks the
scorer and template: "math" (`tagrpo.rewards.math_reward` on the final `\\boxed{}`),
"choice" (GPQA's four options: the letter in the final `\\boxed{}` against the gold letter) or
"choice5" (an AMC12 row whose gold answer is an option letter A-E).

Prompt formats (the user turn, wrapped by each model's chat template, or raw text with
`--no-chat-template` / `--preset paper`; the same for every model):

- math  (all but GPQA): `{question}` + newline +
  `Please reason step by step, and put your final answer within \\boxed{}.`
  (`tagrpo.rollout.DEFAULT_PROMPT_TEMPLATE`).
- choice (GPQA-Diamond): `{question}` + blank line + the options as `A) ...` to `D) ...` + newline +
  `Please reason step by step, and put the letter of the correct option (A, B, C or D) within \\boxed{}.`
  The order of the four options is a seeded shuffle per question (`random.Random(f"{seed}:{record id}")`),
  so it is identical across models and runs with the same `--seed`.
- choice5 (AMC12 rows with a letter answer): the question as given when it lists (A) to (E), else
  with its `options` / `choices` field appended as `A) ...` to `E) ...`; the instruction names
  `(A, B, C, D or E)`.

AMC12 is the common public form of the AMC 2022-2023 problems (`AI-MO/aimo-validation-amc`,
83 problems rewritten to numeric answers; fields `problem` or `question`, `answer`, `id`), beside
AMC23 (`math-ai/amc23`, 40 problems). Float answers such as `142.0` become `142`, as for AMC23.

Sources: loaded with `datasets.load_dataset(hf_id, config, split=...)` when online, or from a local
file with the same fields (`DATA_DIR/<name>.{jsonl,json,parquet,csv}`, e.g. `gsm8k.jsonl`,
`gpqa-diamond.csv`; the alternative stems in `local_names` work too) with `--data-dir`.
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tagrpo.errors import TagrpoError
from tagrpo.eval.records import LOCAL_SUFFIXES, answer_text, read_records
from tagrpo.eval.scoring import (
    LETTERS,
    LETTERS5,
    choice5_reward,
    choice_letter,
    choice_reward,
    scorer_for,
)
from tagrpo.rollout.prompts import DEFAULT_PROMPT_TEMPLATE

# re-exported: the scorers and the file reader lived here before scoring.py and records.py
__all__ = [
    "BENCHMARKS", "CHOICE5_TEMPLATE", "CHOICE_TEMPLATE", "GPQA_FIELDS", "LETTERS", "LETTERS5", "LOCAL_SUFFIXES",
    "MATH_TEMPLATE", "PROMPT_TEMPLATES", "Benchmark", "answer_text", "benchmark_names", "choice5_reward",
    "choice_letter", "choice_reward", "get_benchmark", "gpqa_options", "load_benchmark", "load_eval_data",
    "load_file", "read_records", "scorer_for",
]

MATH_TEMPLATE = DEFAULT_PROMPT_TEMPLATE  # tagrpo.rollout's default user-turn template
CHOICE_TEMPLATE = (
    "{question}\nPlease reason step by step, and put the letter of the correct option "
    "(A, B, C or D) within \\boxed{{}}."
)
CHOICE5_TEMPLATE = (
    "{question}\nPlease reason step by step, and put the letter of the correct option "
    "(A, B, C, D or E) within \\boxed{{}}."
)
PROMPT_TEMPLATES = {"math": MATH_TEMPLATE, "choice": CHOICE_TEMPLATE, "choice5": CHOICE5_TEMPLATE}
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
    question_aliases: tuple[str, ...] = ()  # other names of the question field, tried in order
    letter_answers: bool = False  # a gold answer that is a lone letter A-E makes the row "choice5"


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
        Benchmark("amc12", "AI-MO/aimo-validation-amc", "train", "problem", "answer", id_field="id",
                  question_aliases=("question",), letter_answers=True,
                  description="AMC12 2022 and 2023 (83 problems, answers as numbers; option-letter answers A-E "
                              "are scored as multiple choice)",
                  local_names=("AMC12", "amc_12", "aimo-validation-amc", "aimo_validation_amc")),
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


def gpqa_options(record: dict, seed: int, key: str) -> tuple[list[str], str]:
    """(the four options in shuffled order, letter of the correct one). The shuffle is seeded by
    `f"{seed}:{key}"` (string seeds are stable across processes), the same for every model."""
    options = [str(record[f]).strip() for f in GPQA_FIELDS[1:]]  # correct first
    order = list(range(4))
    random.Random(f"{seed}:{key}").shuffle(order)
    shuffled = [options[i] for i in order]
    return shuffled, LETTERS[order.index(0)]


_LETTER_ANSWER = re.compile(r"^\(?([A-E])\)?$")
_LISTED_OPTION = re.compile(r"\(([A-E])\)")  # "(A)" ... "(E)", as in AoPS' "$\\textbf{(A) }2 \\qquad ..."


def _letter_choice_question(rec: dict, question: str, letter: str, where: str) -> str:
    """The question of a five-option row whose gold answer is `letter`: the text as it is when it
    lists the options (A) to (E), else the text with an `options` / `choices` field appended as
    `A) ...` lines. Refuses a row whose options are nowhere, naming the record."""
    opts = rec.get("options") if rec.get("options") not in (None, "", []) else rec.get("choices")
    if isinstance(opts, dict):
        opts = [opts.get(x, opts.get(x.lower())) for x in LETTERS5]
    if isinstance(opts, (list, tuple)) and len(opts) == 5 and all(o not in (None, "") for o in opts):
        return question + "\n\n" + "\n".join(f"{LETTERS5[j]}) {str(o).strip()}" for j, o in enumerate(opts))
    if {"A", "E"} <= set(_LISTED_OPTION.findall(question)):
        return question
    raise TagrpoError(
        f"{where}: the gold answer {letter!r} is an option letter, but the question lists no options (A) to (E) "
        f"and there is no 'options' or 'choices' field with five options; give the options or a numeric answer"
    )


def _normalize(records: list[dict], bench: Benchmark, source: str, seed: int) -> list[dict]:
    names = (bench.question_field, *bench.question_aliases)
    qname = repr(names[0]) + (f" (or {', '.join(map(repr, names[1:]))})" if len(names) > 1 else "")
    rows = []
    for i, rec in enumerate(records):
        where = f"{source}, record {i + 1}"
        if not isinstance(rec, dict):
            raise TagrpoError(f"{where}: expected an object with fields {qname} and {bench.answer_field!r}")
        qfield = next((f for f in names if rec.get(f) not in (None, "", [])), bench.question_field)
        if bench.kind == "math":
            checks = [(qfield, qname), (bench.answer_field, repr(bench.answer_field))]
        else:
            checks = [(f, repr(f)) for f in GPQA_FIELDS]
        missing = next((shown for f, shown in checks if rec.get(f) in (None, "", [])), None)
        if missing:
            raise TagrpoError(f"{where}: field {missing} missing or empty; the {bench.name} layout needs "
                              f"{', '.join(shown for _, shown in checks)}")
        rid = rec.get(bench.id_field) if bench.id_field else None
        rid = rid if rid not in (None, "") else i
        question = str(rec[qfield]).strip()
        row: dict[str, Any] = {"id": rid, "benchmark": bench.name, "kind": bench.kind}
        if bench.kind == "choice":
            options, letter = gpqa_options(rec, seed, str(rid))
            row["question"] = question + "\n\n" + "\n".join(f"{LETTERS[j]}) {o}" for j, o in enumerate(options))
            row["answer"] = letter
            row["choices"] = options
        else:
            context = rec.get("context") if bench.name == "olympiadbench" else None
            row["question"] = f"{str(context).strip()}\n{question}" if context else question
            row["answer"] = answer_text(rec[bench.answer_field])
            m = _LETTER_ANSWER.match(row["answer"]) if bench.letter_answers else None
            if m:
                row.update(kind="choice5", answer=m.group(1), question=_letter_choice_question(rec, row["question"], m.group(1), where))
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
        r["answer"] = answer_text(r["answer"])
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
