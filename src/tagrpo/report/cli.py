"""`tagrpo report RUN_DIR [RUN_DIR ...]`: plots and an HTML page."""

from __future__ import annotations

from pathlib import Path

import typer

from tagrpo._cli_util import user_errors
from tagrpo.errors import NotYetAvailable


@user_errors
def report_command(run_dirs: list[Path] = typer.Argument(..., help="One or more run directories.")) -> None:
    raise NotYetAvailable("report", "issue 5")
