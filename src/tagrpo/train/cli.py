"""`tagrpo train` and `tagrpo demo`."""

from __future__ import annotations

from pathlib import Path

import typer

from tagrpo._cli_util import user_errors
from tagrpo.errors import NotYetAvailable


@user_errors
def train_command(
    config: Path = typer.Option(..., "--config", help="YAML config file (see configs/)."),
    set_: list[str] = typer.Option([], "--set", help="Override a config field: key=value (repeatable)."),
) -> None:
    raise NotYetAvailable("train", "issue 4")


@user_errors
def demo_command() -> None:
    """Until the trainer lands: load the embedded model, answer three built-in questions, score them."""
    from tagrpo.demo import run_answer_demo

    run_answer_demo()
