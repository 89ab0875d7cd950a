"""Small helpers shared by the subcommands: turning user errors into a clean exit."""

from __future__ import annotations

import functools

import typer

from tagrpo.errors import TagrpoError


def user_errors(fn):
    """Print a TagrpoError / ValueError / FileNotFoundError as one red line and exit 2."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (TagrpoError, ValueError, FileNotFoundError) as e:
            typer.secho(f"error: {e}", fg=typer.colors.RED, err=True)
            raise typer.Exit(code=2) from None

    return wrapper


def progress_printer(console, total: int):
    """A rich progress bar whose description shows reward and uniform fractions."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    prog = Progress(TextColumn("[bold]step"), MofNCompleteColumn(), BarColumn(), TextColumn("{task.description}"),
                    TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=False)

    def make(task_id, start: int):
        def cb(m: dict) -> None:
            desc = (f"reward {m['reward/mean']:.2f}  uniform q0 {m['uniform/q0']:.2f} "
                    f"(✓{m['uniform/q0_all_correct']:.2f} ✗{m['uniform/q0_all_wrong']:.2f})  "
                    f"family {m['uniform/family']:.2f}  {m['time/step']:.0f}s/step")
            prog.update(task_id, completed=m["step"], description=desc)
        return cb

    return prog, make
