"""`tagrpo report RUN_DIR [RUN_DIR ...]`: PNG plots and one self-contained HTML page; several runs
overlay their curves (GRPO vs TA-GRPO at a glance)."""

from __future__ import annotations

from pathlib import Path

import typer

from tagrpo._cli_util import user_errors


@user_errors
def report_command(
    run_dirs: list[Path] = typer.Argument(..., help="One or more run directories (metrics.jsonl, config.yaml, eval_*.json)."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Output directory (default: RUN_DIR/report for one run, ./tagrpo-report for several)."),
    title: str | None = typer.Option(None, "--title", help="Page title."),
) -> None:
    from tagrpo.report.page import write_report

    page = write_report(run_dirs, output, title)
    pngs = sorted(p.name for p in page.parent.glob("*.png"))
    typer.echo(f"wrote {page}  ({', '.join(pngs) or 'no figures'})")
