"""The evaluation runner: sample n responses per question, score them, and aggregate pass@k
(unbiased estimator, mean over questions), greedy accuracy, response length, truncation rate and
response diversity, keeping every sample with its reward so a result can be audited and re-scored.

The paper's claims about TA-GRPO vs GRPO are claims about these numbers: pass@k for k up to 32
(TA-GRPO should gain most at large k, where diversity matters) on the same questions with the same
sampling seeds for every model. `evaluate` is the Python entry point (the trainer calls it for
its before/after table); `tagrpo eval` wraps it for files, benchmarks and several models.

Sampling is seeded per chunk of questions (`seed + chunk index`), so a result depends on
(model, rows, n, sampling, batch_size) only; two models see the same questions, prompts and seeds.

Aggregation (`summarize`, `rescore`, the k checks) is in `tagrpo.eval.summary`, the JSON documents
and the table in `tagrpo.eval.documents`; both are re-exported here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from tagrpo.errors import TagrpoError
from tagrpo.eval.benchmarks import PROMPT_TEMPLATES, scorer_for
from tagrpo.eval.documents import (
    EVAL_FORMAT,
    make_document,
    read_document,
    results_table,
    write_document,
)
from tagrpo.eval.presets import check_system
from tagrpo.eval.summary import (
    CORRECT_THRESHOLD,
    check_ks,
    is_correct,
    parse_ks,
    rescore,
    summarize,
)

# re-exported: these lived here before the split into summary.py and documents.py
__all__ = [
    "CORRECT_THRESHOLD", "DEVICES", "EVAL_FORMAT", "check_ks", "evaluate", "is_correct", "make_document", "parse_ks",
    "read_document", "rescore", "resolve_device", "results_table", "summarize", "write_document",
]

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
    chat_template: bool = True,
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
    see `tagrpo.eval.benchmarks`) in the model's chat template, or as raw text when
    `chat_template` is False (the paper's convention; `system` is then refused). Diversity
    (mean pairwise cosine distance of each question's samples, `diversity_model`: None =
    embedded all-MiniLM-L6-v2) is computed when `diversity` and n >= 2. Result keys:
    n_questions, n_samples, pass@k {"1": .., "2": ..}, mean_reward, greedy_accuracy (if greedy),
    mean_response_length (tokens), truncation_rate, diversity, sampling, prompt_template,
    prompt_format ("chat" or "raw"), time_s, and questions (every sample with text, reward,
    tokens, finished). `dtype` "bf16" samples from a bfloat16 copy of the
    weights on a CPU (about 2x faster on CPUs with bf16 matmul units) and under bf16 autocast on
    a GPU. `device` ("auto", "cpu", "cuda"; see `resolve_device`) moves the model there before
    sampling; None (the default) leaves it where it is, and the engine samples on the model's device.
    """
    from tagrpo.rollout import HFGenerateEngine, SamplingParams, build_prompt_ids

    ks = parse_ks(ks)
    check_ks(ks, n)
    if batch_size < 1:
        raise TagrpoError(f"--batch-size must be >= 1, got {batch_size}")
    check_system(system, chat_template)
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
        prompts.append(build_prompt_ids(tokenizer, str(r["question"]), template=tpl, system=system, chat_template=chat_template))

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
        "prompt_format": "chat" if chat_template else "raw",
        "sampled_tokens": sum(s["tokens"] for q in questions for s in q["samples"]),
        "time_s": {"generate": t_gen, "reward": t_rew, "total": time.perf_counter() - t0},
        "questions": questions,
    })
    return result
