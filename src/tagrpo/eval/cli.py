"""`tagrpo eval`: pass@k of a model on a file or a benchmark."""

from __future__ import annotations

import typer

from tagrpo._cli_util import user_errors
from tagrpo.errors import NotYetAvailable


@user_errors
def eval_command(
    model: list[str] = typer.Option(..., "--model", help="HF id, local path, run dir, or 'smollm2-135m-instruct'."),
    data: str = typer.Option(..., "--data", help="A .jsonl/.parquet file or a benchmark name."),
) -> None:
    raise NotYetAvailable("eval", "issue 5")
