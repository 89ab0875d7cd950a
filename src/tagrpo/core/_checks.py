"""Input validation shared by the core math: every error names the argument and what was valid."""

from __future__ import annotations

import torch


def check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name}={value!r} is not valid; choose one of {', '.join(map(repr, choices))}")


def check_1d(name: str, t: torch.Tensor) -> None:
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != 1:
        raise ValueError(f"{name} must be 1-D (B,), got shape {tuple(t.shape)}")


def check_finite(name: str, t: torch.Tensor) -> None:
    if t.is_floating_point() and not torch.isfinite(t).all():
        bad = (~torch.isfinite(t)).nonzero()[0].tolist()
        raise ValueError(f"{name} contains NaN or inf (first at index {bad}); fix the reward or mask it out")


def check_same_shape(ref_name: str, ref: torch.Tensor, **others: torch.Tensor | None) -> None:
    for name, t in others.items():
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.shape != ref.shape:
            raise ValueError(
                f"{name} has shape {tuple(t.shape)} but {ref_name} has shape {tuple(ref.shape)}; they must match"
            )
