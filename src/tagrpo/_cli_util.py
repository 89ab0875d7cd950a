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
