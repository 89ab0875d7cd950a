"""`tagrpo neighbors`: build N neighbors per question (rules offline, or an LLM backend)."""

from __future__ import annotations

from pathlib import Path

import typer

from tagrpo._cli_util import user_errors
from tagrpo.errors import NotYetAvailable


@user_errors
def neighbors_command(
    input: Path = typer.Option(..., "--input", help="Input .jsonl or .parquet with question and answer fields."),
    output: Path = typer.Option(..., "--output", help="Output .jsonl or .parquet; adds `neighbors: list[str]`."),
    n: int = typer.Option(3, "--n", help="Neighbors per question (N)."),
    backend: str = typer.Option("rules", "--backend", help="rules | openai | hf"),
) -> None:
    raise NotYetAvailable("neighbors", "issue 3")
