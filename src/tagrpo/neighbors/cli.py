"""`tagrpo neighbors`: build N problem-equivalent neighbors per question (TA-GRPO step 1).

Rules offline (`--backend rules`), any OpenAI-compatible endpoint (`--backend openai`), or a
local transformers model (`--backend hf`); rows of the built-in arithmetic generator can instead
be restated from their structure in other surface forms (`--backend generator`). Plain GRPO
skips this step. With `--store` the run is resumable: re-running the same command after a crash or Ctrl-C sends no request whose answer
is stored. The output is written atomically, only when the run finishes.
"""

from __future__ import annotations

import json
import os
import signal
from enum import Enum
from pathlib import Path

import typer

from tagrpo._cli_util import user_errors

DEFAULT_BASE_URL = "https://api.openai.com/v1"


class BackendName(str, Enum):
    rules = "rules"
    openai = "openai"
    hf = "hf"
    generator = "generator"


def _sigterm_as_interrupt(signum, frame):  # pragma: no cover - exercised through a subprocess
    raise KeyboardInterrupt


def _make_backend(backend: BackendName, *, model, base_url, api_key_env, concurrency, timeout, max_retries,
                  backoff_base, backoff_max, max_requests, temperature, max_tokens, batch_size, device, seed,
                  log, console):
    if backend is BackendName.rules:
        from tagrpo.neighbors.backends import RuleBackend

        return RuleBackend(seed=seed)
    if backend is BackendName.openai:
        from tagrpo.neighbors.openai_backend import OpenAIBackend, RetryPolicy

        api_key = os.environ.get(api_key_env) or None
        if api_key is None:
            console.print(f"[yellow]note:[/] ${api_key_env} is not set: sending requests without an API key "
                          "(fine for a local vLLM / llama.cpp server)", soft_wrap=True)
        return OpenAIBackend(
            model=model or "", base_url=base_url, api_key=api_key, concurrency=concurrency, timeout=timeout,
            retry=RetryPolicy(max_retries=max_retries, backoff_base=backoff_base, backoff_max=backoff_max),
            max_requests=max_requests, temperature=temperature, max_tokens=max_tokens, seed=seed, log=log,
        )
    from tagrpo.models import EMBEDDED_NAME
    from tagrpo.neighbors.hf_backend import HFBackend

    return HFBackend(model or EMBEDDED_NAME, batch_size=batch_size, temperature=temperature,
                     max_new_tokens=min(max_tokens, 1024) if max_tokens > 0 else 384,
                     max_requests=max_requests, device=device, seed=seed)


def _summary(report, skipped_count: int, elapsed: float, store_path):
    from rich.markup import escape
    from rich.table import Table

    t = Table(title=f"tagrpo neighbors: N={report.n}", show_header=True, header_style="bold")
    t.add_column("")
    t.add_column("count", justify="right")
    t.add_row("rows", str(report.rows))
    if skipped_count:
        t.add_row("rows skipped (no question/answer)", f"[yellow]{skipped_count}[/]")
    t.add_row(f"rows with {report.n} neighbors", f"[green]{report.rows_complete}[/]")
    short = len(report.short_rows)
    t.add_row(f"rows with fewer than {report.n}", f"[yellow]{short}[/]" if short else "0")
    t.add_row("neighbors written", str(report.neighbors))
    t.add_row("candidates: new / reused from store", f"{report.new} / {report.reused}")
    if report.not_applicable:
        t.add_row("not applicable (rule did not apply)", str(report.not_applicable))
    total_rejected = sum(report.rejected.values())
    t.add_row("rejected", f"[red]{total_rejected}[/]" if total_rejected else "0")
    for reason, count in sorted(report.rejected.items(), key=lambda kv: -kv[1]):
        t.add_row(f"  {reason}", str(count))
    if report.verified:
        t.add_row("verified by solving (--verify-solve)", str(report.verified))
    if report.errors:
        t.add_row("failed requests (after retries)", f"[red]{report.errors}[/]")
    t.add_row("requests sent / retries", f"{report.requests} / {report.retries}")
    if report.prompt_tokens is not None:
        t.add_row("tokens: prompt / completion", f"{report.prompt_tokens} / {report.completion_tokens}")
    t.add_row("time", f"{elapsed:.1f} s")
    if store_path:
        t.add_row("store", escape(str(store_path)))
    return t


@user_errors
def neighbors_command(
    input: Path = typer.Option(..., "--input", help="Input .jsonl, .json or .parquet with question and answer fields (GSM8K / MATH names understood)."),
    output: Path = typer.Option(..., "--output", help="Output .jsonl or .parquet: the rows plus `neighbors: list[str]`. Written atomically at the end."),
    n: int = typer.Option(3, "--n", min=1, help="Neighbors per question (N)."),
    backend: BackendName = typer.Option(BackendName.rules, "--backend", case_sensitive=False, help="rules (offline) | openai (any OpenAI-compatible endpoint) | hf (local transformers model) | generator (rows of the built-in arithmetic generator, restated from their `structure`)."),
    transformations: str = typer.Option(None, "--transformations", help="Comma-separated subset. rules: reorder,format,rename,instruct; openai/hf: paraphrase,rename,format; generator: renamed,question_first,number_words,given_find,past_tense. Default: all."),
    store: Path = typer.Option(None, "--store", help="SQLite file caching every candidate: makes the run resumable and re-runs free."),
    seed: int = typer.Option(0, "--seed", help="Seed of the rules and of request sampling."),
    max_candidates: int = typer.Option(None, "--max-candidates", help="Candidates tried per question at most (default 6N for rules, 2N for models)."),
    question_field: str = typer.Option(None, "--question-field", help="Question field name (default: question, else problem)."),
    answer_field: str = typer.Option(None, "--answer-field", help="Answer field name (default: answer, else solution)."),
    min_length_ratio: float = typer.Option(0.5, "--min-length-ratio", help="Reject neighbors shorter than this times the original."),
    max_length_ratio: float = typer.Option(2.5, "--max-length-ratio", help="Reject neighbors longer than this times the original."),
    verify_solve: bool = typer.Option(False, "--verify-solve", help="Also ask the model to solve each neighbor; keep it only if its answer matches the gold (math_reward)."),
    model: str = typer.Option(None, "--model", help="openai: the model name (required, e.g. gpt-4o). hf: a local path or alias (default smollm2-135m-instruct)."),
    base_url: str = typer.Option(DEFAULT_BASE_URL, "--base-url", help="openai: the API base URL, e.g. http://localhost:8000/v1 for vLLM."),
    api_key_env: str = typer.Option("OPENAI_API_KEY", "--api-key-env", help="openai: environment variable holding the API key (never printed or stored)."),
    concurrency: int = typer.Option(4, "--concurrency", min=1, help="openai: requests in flight at most."),
    timeout: float = typer.Option(60.0, "--timeout", help="openai: seconds to wait for one reply."),
    max_retries: int = typer.Option(5, "--max-retries", min=0, help="openai: retries per request (429, 5xx, timeouts, connection errors)."),
    backoff_base: float = typer.Option(1.0, "--backoff-base", help="openai: first backoff delay in seconds (doubles each retry, with jitter)."),
    backoff_max: float = typer.Option(30.0, "--backoff-max", help="openai: longest backoff delay in seconds."),
    max_requests: int = typer.Option(None, "--max-requests", min=0, help="Spend guard: send at most this many requests in this run (retries count)."),
    temperature: float = typer.Option(0.7, "--temperature", help="openai/hf: sampling temperature for rewordings."),
    max_tokens: int = typer.Option(1024, "--max-tokens", help="openai/hf: longest reply in tokens (0: let the server decide)."),
    batch_size: int = typer.Option(8, "--batch-size", min=1, help="hf: prompts per generate() call."),
    device: str = typer.Option("cpu", "--device", help="hf: torch device."),
    log_file: Path = typer.Option(None, "--log-file", help="Append one JSON line per request attempt (no headers, no key)."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
) -> None:
    """Rewrite each question into N problem-equivalent neighbors, validated and deduplicated."""
    import time

    from rich.console import Console
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from tagrpo.data.io import WRITE_SUFFIXES, read_rows, write_rows
    from tagrpo.errors import TagrpoError
    from tagrpo.neighbors.builder import BuildOptions, NeighborBuilder
    from tagrpo.neighbors.store import NeighborStore
    from tagrpo.neighbors.validate import ValidationConfig

    err = Console(stderr=True)
    out = Console()
    if output.suffix.lower() not in WRITE_SUFFIXES:
        raise TagrpoError(f"--output {output}: cannot write '{output.suffix or output.name}' files; use one of {', '.join(WRITE_SUFFIXES)}")
    skipped: list = []
    rows = read_rows(input, question_field, answer_field, skipped=skipped)
    for s in skipped[:20]:
        err.print(f"[yellow]warning:[/] {escape(str(s))} (row skipped)", highlight=False, soft_wrap=True)
    if len(skipped) > 20:
        err.print(f"[yellow]warning:[/] ... and {len(skipped) - 20} more rows skipped", soft_wrap=True)
    if not rows:
        raise TagrpoError(f"{input}: no usable rows (every row lacks a question or an answer)")

    chosen = tuple(t.strip() for t in transformations.split(",") if t.strip()) if transformations else None
    if backend is BackendName.generator:
        from tagrpo.neighbors.generator import build_generator_neighbors

        if verify_solve:
            raise TagrpoError("--verify-solve needs a model: use --backend openai or --backend hf "
                              "(generator neighbors are answer-preserving by construction)")
        if store is not None:
            err.print("[yellow]note:[/] --store is not used by --backend generator (deterministic, no requests)", soft_wrap=True)
        t0 = time.monotonic()
        result, report = build_generator_neighbors(rows, n, seed, chosen, source=str(input))
        write_rows(output, result)
        out.print(_summary(report, len(skipped), time.monotonic() - t0, None))
        out.print(f"wrote {len(result)} rows to {escape(str(output))}", highlight=False, soft_wrap=True)
        return
    options = BuildOptions(
        n=n,
        transformations=chosen,
        max_candidates=max_candidates,
        verify_solve=verify_solve,
        validation=ValidationConfig(min_length_ratio=min_length_ratio, max_length_ratio=max_length_ratio),
    )
    db = NeighborStore(store if store is not None else ":memory:")
    log_fh = log_file.open("a", encoding="utf-8") if log_file else None

    def log(entry: dict) -> None:
        db.log_request(entry)
        if log_fh is not None:
            log_fh.write(json.dumps(entry, sort_keys=True) + "\n")
            log_fh.flush()

    # Ctrl-C and SIGTERM both stop cleanly (the store is transactional either way), even when
    # the parent started us with SIGINT ignored
    previous = signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    be = None
    try:
        be = _make_backend(backend, model=model, base_url=base_url, api_key_env=api_key_env, concurrency=concurrency,
                           timeout=timeout, max_retries=max_retries, backoff_base=backoff_base, backoff_max=backoff_max,
                           max_requests=max_requests, temperature=temperature, max_tokens=max_tokens,
                           batch_size=batch_size, device=device, seed=seed, log=log, console=err)
        bar = Progress(
            TextColumn("[bold]neighbors[/]"), BarColumn(), MofNCompleteColumn(),
            TextColumn("[green]{task.fields[accepted]} accepted[/] [red]{task.fields[rejected]} rejected[/]"),
            TextColumn("{task.fields[requests]} requests"), TimeElapsedColumn(),
            console=err, disable=not progress, transient=False,
        )
        task = bar.add_task("neighbors", total=len(rows), accepted=0, rejected=0, requests=0)

        def on_progress(p: dict) -> None:
            bar.update(task, completed=p["done"], accepted=p["accepted"], rejected=p["rejected"], requests=p["requests"])

        t0 = time.monotonic()
        builder = NeighborBuilder(be, db, options, progress=on_progress)
        with bar:
            result, report = builder.build(rows)
        write_rows(output, result)
    except KeyboardInterrupt:
        where = f"kept in {store}; re-run the same command to resume" if store else "not kept (no --store)"
        err.print(f"[yellow]interrupted:[/] results so far are {escape(where)}. {escape(str(output))} was not written.", soft_wrap=True)
        raise typer.Exit(code=130) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
        if be is not None:
            be.close()
        db.close()
        if log_fh is not None:
            log_fh.close()

    out.print(_summary(report, len(skipped), time.monotonic() - t0, store))
    if report.short_rows:
        ids = escape(", ".join(f"{rid} ({have})" for rid, have in report.short_rows[:10]))
        more = f" and {len(report.short_rows) - 10} more" if len(report.short_rows) > 10 else ""
        err.print(f"[yellow]warning:[/] {len(report.short_rows)} rows have fewer than {n} neighbors "
                  f"(id (count): {ids}{more})", highlight=False, soft_wrap=True)
    if report.budget_exhausted:
        hint = "re-run the same command to continue" if store else "use --store to make runs resumable"
        err.print(f"[yellow]warning:[/] stopped at --max-requests {max_requests}; {hint}", soft_wrap=True)
    out.print(f"wrote {len(result)} rows to {escape(str(output))}", highlight=False, soft_wrap=True)
