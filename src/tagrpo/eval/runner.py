"""The evaluation runner: sample n responses per question, score them, and aggregate pass@k
(unbiased estimator, mean over questions), greedy accuracy, response length, truncation rate and
response diversity, keeping every sample with its reward so a result can be audited and re-scored.

The paper's claims about TA-GRPO vs GRPO are claims about these numbers: pass@k for k up to 32
(TA-GRPO should gain most at large k, where diversity matters) on the same questions with the same
sampling seeds for every model. `evaluate` is the Python entry point (the trainer calls it for
its before/after table); `tagrpo eval` wraps it for files, benchmarks and several models.

Sampling is seeded per chunk of questions (`seed + chunk index`), so a result depends on
(model, rows, n, sampling, batch_size) only; two models see the same questions, prompts and seeds.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tagrpo.errors import TagrpoError
from tagrpo.eval.benchmarks import PROMPT_TEMPLATES, scorer_for
from tagrpo.eval.passk import mean_pass_at_k

EVAL_FORMAT = "tagrpo-eval/1"
CORRECT_THRESHOLD = 0.5  # a sample counts as correct when its reward is >= this (rewards are 0/1)
DEVICES = ("auto", "cpu", "cuda")


def resolve_device(device: str, option: str = "--device") -> str:
    """'auto' -> 'cuda' when torch sees a CUDA device, else 'cpu'; 'cpu' / 'cuda' as given.
    Refuses any other value, and 'cuda' without a CUDA device, naming `option` and the choices."""
    choices = ", ".join(DEVICES)
    if device not in DEVICES:
        raise TagrpoError(f"{option} {device!r} is not valid; choose one of {choices}")
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise TagrpoError(f"{option} cuda: torch sees no CUDA device; choose one of {choices} (auto and cpu run on the CPU here)")
    return device


def parse_ks(ks: str | Sequence[int]) -> list[int]:
    """`"1,2,4"` or `[1, 2, 4]` -> sorted unique ints >= 1."""
    if isinstance(ks, str):
        try:
            vals = [int(x) for x in ks.replace(" ", "").split(",") if x]
        except ValueError:
            raise TagrpoError(f"--k {ks!r}: expected a comma-separated list of integers, e.g. 1,2,4,8") from None
    else:
        vals = [int(x) for x in ks]
    if not vals:
        raise TagrpoError("--k: give at least one k, e.g. 1,2,4")
    bad = [k for k in vals if k < 1]
    if bad:
        raise TagrpoError(f"--k: every k must be >= 1, got {bad[0]}")
    return sorted(set(vals))


def check_ks(ks: Sequence[int], n: int) -> None:
    """Refuse k > n: the unbiased estimator needs at least k samples per question."""
    if n < 1:
        raise TagrpoError(f"--n must be >= 1, got {n}")
    too_big = [k for k in ks if k > n]
    if too_big:
        raise TagrpoError(
            f"--k {too_big[0]} is larger than --n {n}: pass@{too_big[0]} needs at least {too_big[0]} samples "
            f"per question. Raise --n to {max(too_big)} or drop k > {n} (valid k here: 1..{n})."
        )


def is_correct(reward: float) -> bool:
    return reward is not None and not math.isnan(reward) and reward >= CORRECT_THRESHOLD


def summarize(questions: Sequence[dict], ks: Sequence[int]) -> dict:
    """Aggregate metrics from per-question records (`samples`: [{reward, tokens, finished}],
    optional `greedy` sample, optional `diversity`). Used by `evaluate` and by re-scoring."""
    if not questions:
        raise TagrpoError("no questions to summarize")
    counts = []
    for q in questions:
        samples = q.get("samples") or []
        if not samples:
            raise TagrpoError(f"question {q.get('id')!r} has no samples")
        counts.append((len(samples), sum(1 for s in samples if is_correct(s["reward"]))))
    n_min = min(n for n, _ in counts)
    check_ks(ks, n_min)
    all_samples = [s for q in questions for s in q["samples"]]
    out: dict[str, Any] = {
        "n_questions": len(questions),
        "n_samples": n_min if n_min == max(n for n, _ in counts) else [n for n, _ in counts],
        "pass@k": {str(k): mean_pass_at_k(counts, k) for k in ks},
        "mean_reward": sum(float(s["reward"]) for s in all_samples) / len(all_samples),
        "mean_response_length": sum(s["tokens"] for s in all_samples) / len(all_samples),
        "truncation_rate": sum(1 for s in all_samples if not s["finished"]) / len(all_samples),
        "n_all_correct": sum(1 for n, c in counts if c == n),
        "n_all_wrong": sum(1 for _, c in counts if c == 0),
    }
    greedy = [q["greedy"] for q in questions if q.get("greedy")]
    if greedy:
        out["greedy_accuracy"] = sum(1 for g in greedy if is_correct(g["reward"])) / len(greedy)
        out["greedy_truncation_rate"] = sum(1 for g in greedy if not g["finished"]) / len(greedy)
    divs = [q["diversity"] for q in questions if q.get("diversity") is not None and not math.isnan(q["diversity"])]
    if divs:
        out["diversity"] = sum(divs) / len(divs)
    return out


def rescore(result: dict, reward_fn: Callable[[str, str], float] | None = None) -> dict:
    """Re-score every stored sample of one benchmark result (e.g. after fixing the verifier) and
    recompute its metrics; returns a new result dict. `reward_fn` defaults to the row kind's scorer."""
    questions = []
    for q in result["questions"]:
        fn = reward_fn or scorer_for(q.get("kind", "math"))
        q = dict(q)
        q["samples"] = [dict(s, reward=float(fn(s["text"], q["answer"]))) for s in q["samples"]]
        if q.get("greedy"):
            q["greedy"] = dict(q["greedy"], reward=float(fn(q["greedy"]["text"], q["answer"])))
        q["n_correct"] = sum(1 for s in q["samples"] if is_correct(s["reward"]))
        questions.append(q)
    ks = [int(k) for k in result["pass@k"]]
    new = {k: v for k, v in result.items() if k != "questions"}
    new.update(summarize(questions, ks))
    new["questions"] = questions
    return new


class _Progress:
    """Progress on stderr: a rich bar on a terminal, one plain line per update otherwise (logs)."""

    def __init__(self, total: int, label: str):
        from rich.console import Console

        self.total, self.label, self.done, self.t0 = total, label, 0, time.perf_counter()
        self.console = Console(stderr=True)
        self.bar = None
        if self.console.is_terminal:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self.bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("samples"),
                                TimeElapsedColumn(), TimeRemainingColumn(), console=self.console)
            self.bar.start()
            self.task = self.bar.add_task(label, total=total)

    def advance(self, n: int) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.advance(self.task, n)
        else:
            self.console.print(f"{self.label}: {self.done}/{self.total} samples ({time.perf_counter() - self.t0:.0f} s)", highlight=False)

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def evaluate(
    model,
    tokenizer,
    rows: Sequence[dict],
    n: int,
    ks: Sequence[int] | str,
    sampling=None,
    *,
    greedy: bool = False,
    batch_size: int = 32,
    template: str | None = None,
    system: str | None = None,
    reward_fn: Callable[[str, str], float] | None = None,
    diversity: bool = True,
    diversity_model: Any = None,
    engine=None,
    dtype: str = "fp32",
    progress: bool = False,
    label: str = "eval",
    device: str | None = None,
) -> dict:
    """Evaluate a policy on rows `{"id", "question", "answer", "kind"?}`; returns one benchmark result.

    n samples per question with `sampling` (a `tagrpo.rollout.SamplingParams`; default
    temperature 0.6, top-p 0.95, 256 new tokens, seed 0), plus one greedy response per question
    when `greedy`. Rewards: `reward_fn(text, answer)` if given, else by row kind (math_reward for
    "math", the option letter for "choice"). The prompt is `template` (default: per row kind,
    see `tagrpo.eval.benchmarks`) in the model's chat template. Diversity (mean pairwise cosine
    distance of each question's samples, `diversity_model`: None = embedded all-MiniLM-L6-v2) is
    computed when `diversity` and n >= 2. Result keys: n_questions, n_samples, pass@k
    {"1": .., "2": ..}, mean_reward, greedy_accuracy (if greedy), mean_response_length (tokens),
    truncation_rate, diversity, sampling, prompt_template, time_s, and questions (every sample
    with text, reward, tokens, finished). `dtype` "bf16" samples from a bfloat16 copy of the
    weights on a CPU (about 2x faster on CPUs with bf16 matmul units) and under bf16 autocast on
    a GPU. `device` ("auto", "cpu", "cuda"; see `resolve_device`) moves the model there before
    sampling; None (the default) leaves it where it is, and the engine samples on the model's device.
    """
    from tagrpo.rollout import HFGenerateEngine, SamplingParams, build_prompt_ids

    ks = parse_ks(ks)
    check_ks(ks, n)
    if batch_size < 1:
        raise TagrpoError(f"--batch-size must be >= 1, got {batch_size}")
    rows = list(rows)
    if not rows:
        raise TagrpoError("no questions to evaluate")
    sampling = sampling or SamplingParams(temperature=0.6, top_p=0.95, max_new_tokens=256, seed=0)
    if device is not None:
        device = resolve_device(device, option="device")
        if model is not None:
            model.to(device)
    engine = engine or HFGenerateEngine(model, tokenizer, max_batch_size=batch_size, dtype=dtype)
    t0 = time.perf_counter()

    prompts, templates = [], []
    for r in rows:
        kind = r.get("kind", "math")
        tpl = template or PROMPT_TEMPLATES.get(kind)
        if tpl is None:
            raise TagrpoError(f"row {r.get('id')!r}: unknown kind {kind!r}; choose one of {', '.join(PROMPT_TEMPLATES)}")
        templates.append(tpl)
        prompts.append(build_prompt_ids(tokenizer, str(r["question"]), template=tpl, system=system))

    per_chunk = max(1, batch_size // n)
    bar = _Progress(len(rows) * n + (len(rows) if greedy else 0), label) if progress else None
    completions: list[list] = []
    try:
        for c, start in enumerate(range(0, len(rows), per_chunk)):
            chunk = prompts[start : start + per_chunk]
            flat = [p for p in chunk for _ in range(n)]
            seed = None if sampling.seed is None else sampling.seed + c
            params = SamplingParams(sampling.temperature, sampling.top_p, sampling.max_new_tokens, True, seed)
            outs = engine.generate(flat, params)
            completions.extend(outs[i * n : (i + 1) * n] for i in range(len(chunk)))
            if bar is not None:
                bar.advance(len(flat))
        greedy_outs = None
        if greedy:
            greedy_outs = []
            gparams = SamplingParams(0.0, 1.0, sampling.max_new_tokens, False, None)
            for start in range(0, len(rows), batch_size):
                greedy_outs.extend(engine.generate(prompts[start : start + batch_size], gparams))
                if bar is not None:
                    bar.advance(len(prompts[start : start + batch_size]))
    finally:
        if bar is not None:
            bar.stop()
    t_gen = time.perf_counter() - t0

    questions = []
    for i, r in enumerate(rows):
        fn = reward_fn or scorer_for(r.get("kind", "math"))
        samples = [
            {"text": c.text, "reward": float(fn(c.text, r["answer"])), "tokens": len(c.token_ids), "finished": bool(c.finished)}
            for c in completions[i]
        ]
        q = {
            "id": r.get("id", i), "kind": r.get("kind", "math"), "question": r["question"], "answer": r["answer"],
            "n_correct": sum(1 for s in samples if is_correct(s["reward"])), "samples": samples,
        }
        if greedy_outs is not None:
            g = greedy_outs[i]
            q["greedy"] = {"text": g.text, "reward": float(fn(g.text, r["answer"])), "tokens": len(g.token_ids), "finished": bool(g.finished)}
        questions.append(q)
    t_rew = time.perf_counter() - t0 - t_gen

    div_label = None
    if diversity and n >= 2:
        from tagrpo.eval.diversity import embedder_name, pairwise_distances

        dists = pairwise_distances([[s["text"] for s in q["samples"]] for q in questions], diversity_model)
        for q, d in zip(questions, dists):
            q["diversity"] = d
        div_label = embedder_name(diversity_model)

    result = summarize(questions, ks)
    result.update({
        "diversity_model": div_label,
        "sampling": {"n": n, "temperature": sampling.temperature, "top_p": sampling.top_p,
                     "max_new_tokens": sampling.max_new_tokens, "seed": sampling.seed, "batch_size": batch_size},
        "prompt_template": template if template else sorted({t for t in templates}),
        "system_prompt": system,
        "sampled_tokens": sum(s["tokens"] for q in questions for s in q["samples"]),
        "time_s": {"generate": t_gen, "reward": t_rew, "total": time.perf_counter() - t0},
        "questions": questions,
    })
    return result


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
