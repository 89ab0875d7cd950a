"""`tagrpo eval`: pass@k of one or more models on files or benchmarks, side by side.

Every model sees the same questions, prompts and sampling seeds, so the columns differ only by
the policy (base vs GRPO vs TA-GRPO, as in the paper's tables). `--preset paper` applies the
paper's evaluation conventions (`tagrpo.eval.presets`); explicit flags override them. Heavy
imports happen inside.
"""

from __future__ import annotations

from pathlib import Path

import typer

from tagrpo._cli_util import user_errors


def _display_names(models: list[str]) -> list[str]:
    names = []
    for m in models:
        p = Path(m)
        name = m if not p.exists() else (p.name if p.name not in ("final", "model") else f"{p.parent.name}/{p.name}")
        names.append(name or m)
    seen: dict[str, int] = {}
    out = []
    for n in names:
        seen[n] = seen.get(n, 0) + 1
        out.append(n if seen[n] == 1 else f"{n} #{seen[n]}")
    return out


@user_errors
def eval_command(
    model: list[str] = typer.Option(["smollm2-135m-instruct"], "--model", help="HF id, local path, run dir, or 'smollm2-135m-instruct' (the embedded model, the default). Repeat to compare models (differences are vs the first)."),
    data: list[str] = typer.Option(..., "--data", help="A .jsonl/.json/.parquet file, or a benchmark: gsm8k, math500, aime24, aime25, amc23, amc12, olympiadbench, minerva, gpqa-diamond. Repeatable."),
    data_dir: Path | None = typer.Option(None, "--data-dir", help="Directory with local benchmark files (<name>.jsonl/.parquet/.csv in the benchmark's own layout)."),
    preset: str | None = typer.Option(None, "--preset", help="Evaluation conventions: 'paper' = the TA-GRPO paper's (n=128, T=0.6, top-p 0.95, 3072 new tokens, k=1,2,4,...,128, raw-text prompt without the chat template). Explicit flags override its values."),
    n: int | None = typer.Option(None, "--n", help="Samples per question (default 4; --preset paper: 128)."),
    k: str | None = typer.Option(None, "--k", help="Comma-separated k for pass@k; every k must be <= --n (default 1,2,4; --preset paper: powers of two up to --n)."),
    temperature: float | None = typer.Option(None, "--temperature", help="Sampling temperature (default 0.6)."),
    top_p: float | None = typer.Option(None, "--top-p", help="Nucleus sampling (default 0.95)."),
    max_new_tokens: int | None = typer.Option(None, "--max-new-tokens", help="Response budget in tokens (default 256, CPU-sized; --preset paper: 3072)."),
    chat_template: bool | None = typer.Option(None, "--chat-template/--no-chat-template", help="Wrap the prompt in the model's chat template, or give it as raw text (default chat template; --preset paper: raw text)."),
    limit: int | None = typer.Option(None, "--limit", help="Only the first N questions of each data set."),
    seed: int = typer.Option(0, "--seed", help="Sampling seed (and GPQA option shuffle); the same for every model."),
    greedy: bool = typer.Option(False, "--greedy", help="Also decode one greedy response per question (greedy accuracy)."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write the JSON result (metrics and every sample with its reward) here."),
    batch_size: int = typer.Option(32, "--batch-size", help="Max sequences per generate call."),
    diversity_model: str | None = typer.Option(None, "--diversity-model", help="sentence-transformers model for diversity (default: embedded all-MiniLM-L6-v2)."),
    no_diversity: bool = typer.Option(False, "--no-diversity", help="Skip the embedding diversity metric."),
    template: str | None = typer.Option(None, "--template", help="Override the user-turn template ({question} is replaced) for every benchmark."),
    system: str | None = typer.Option(None, "--system", help="System message (default: none; needs the chat template)."),
    question_field: str | None = typer.Option(None, "--question-field", help="Question field of a data file (default: question/problem)."),
    answer_field: str | None = typer.Option(None, "--answer-field", help="Answer field of a data file (default: answer/solution)."),
    dtype: str = typer.Option("fp32", "--dtype", help="Sampling weights: fp32, or bf16 (a bfloat16 copy on a CPU, about 2x faster with bf16 matmul units; bf16 autocast on a GPU)."),
    device: str = typer.Option("auto", "--device", help="Where each model samples: auto (CUDA when torch sees a GPU, else CPU), cpu or cuda."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
) -> None:
    from rich.console import Console

    from tagrpo.errors import TagrpoError
    from tagrpo.eval.benchmarks import load_eval_data
    from tagrpo.eval.presets import check_system, resolve_eval_settings
    from tagrpo.eval.runner import (
        make_document,
        resolve_device,
        results_table,
        write_document,
    )

    # before loading anything: explicit flags over the preset's values, all checked
    resolved = resolve_eval_settings(preset, n=n, k=k, temperature=temperature, top_p=top_p,
                                     max_new_tokens=max_new_tokens, chat_template=chat_template)
    n, ks, temperature, top_p, max_new_tokens = (resolved[x] for x in ("n", "k", "temperature", "top_p", "max_new_tokens"))
    check_system(system, resolved["chat_template"])
    if dtype not in ("fp32", "bf16"):
        raise TagrpoError(f"--dtype {dtype!r} is not valid; choose one of fp32, bf16")
    device = resolve_device(device, option="--device")
    if limit is not None and limit < 1:
        raise TagrpoError(f"--limit must be >= 1, got {limit}")
    if template is not None and "{question}" not in template:
        raise TagrpoError("--template must contain {question}")
    if data_dir is not None and not data_dir.is_dir():
        raise FileNotFoundError(f"--data-dir {data_dir}: no such directory")
    from tagrpo.rollout import SamplingParams

    sampling = SamplingParams(temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens, seed=seed)

    console = Console()
    err = Console(stderr=True)
    if resolved["preset"]:
        err.print(f"[bold]--preset {resolved['preset']}[/bold]: n={n}, k={','.join(map(str, ks))}, T={temperature}, top-p={top_p}, "
                  f"{max_new_tokens} new tokens, {'chat template' if resolved['chat_template'] else 'raw-text prompt (no chat template)'}",
                  highlight=False)
    datasets = []
    for d in data:
        label, rows = load_eval_data(d, data_dir, seed=seed, limit=limit, question_field=question_field, answer_field=answer_field)
        if any(label == x[0] for x in datasets):
            label = f"{label}#{len(datasets)}"
        datasets.append((label, rows))
        err.print(f"[bold]{label}[/bold]: {len(rows)} questions")

    import gc

    from tagrpo.eval.runner import evaluate
    from tagrpo.models import load_policy, resolve_model_path

    settings = {
        "preset": resolved["preset"], "chat_template": resolved["chat_template"], "n": n, "k": ks, "temperature": temperature, "top_p": top_p, "max_new_tokens": max_new_tokens, "seed": seed,
        "greedy": greedy, "limit": limit, "batch_size": batch_size, "dtype": dtype, "device": device, "data": list(data),
        "data_dir": str(data_dir) if data_dir else None, "template": template, "system": system,
        "diversity_model": None if no_diversity else (diversity_model or "all-MiniLM-L6-v2"),
    }
    results = []
    for name, spec in zip(_display_names(model), model):
        path = resolve_model_path(spec)
        err.print(f"[bold]model[/bold] {name}  ({path}, on {device})")
        policy, tok = load_policy(spec)  # on the CPU; evaluate moves it to `device`
        entry = {"name": name, "model": spec, "path": str(path), "benchmarks": {}}
        for label, rows in datasets:
            entry["benchmarks"][label] = evaluate(
                policy, tok, rows, n, ks, sampling, greedy=greedy, batch_size=batch_size, template=template,
                system=system, chat_template=resolved["chat_template"], diversity=not no_diversity, diversity_model=diversity_model, dtype=dtype,
                progress=not quiet, label=f"{name} · {label}", device=device,
            )
            r = entry["benchmarks"][label]
            err.print(f"  {label}: " + "  ".join(f"pass@{kk}={100 * v:.1f}%" for kk, v in r["pass@k"].items())
                      + f"  ({r['time_s']['total']:.0f} s)")
        results.append(entry)
        if output is not None:  # partial results survive a crash in a later model
            write_document(output, make_document(results, settings))
        del policy, tok
        gc.collect()

    doc = make_document(results, settings)
    console.print(results_table(doc))
    if output is not None:
        write_document(output, doc)
        console.print(f"wrote {output}")
