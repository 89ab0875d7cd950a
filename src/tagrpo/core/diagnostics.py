"""Diagnostics that explain GRPO's vanishing signal: uniform-reward groups, non-zero advantages.

Pass per-prompt ids to see the GRPO (q0) view and family ids for the TA-GRPO view; the trainer
logs both as `uniform/q0_*` and `uniform/family_*`.
"""

from __future__ import annotations

import torch

from tagrpo.core._checks import check_1d, check_finite


def uniform_fraction(rewards: torch.Tensor, group_ids: torch.Tensor) -> dict[str, float]:
    """Fractions of groups whose rewards are all equal ("uniform"), all equal and >= 1
    ("all_correct"), all equal and <= 0 ("all_wrong"). Also "groups": the number of groups."""
    check_1d("rewards", rewards)
    check_1d("group_ids", group_ids)
    if rewards.shape != group_ids.shape:
        raise ValueError(
            f"rewards has shape {tuple(rewards.shape)} but group_ids has shape {tuple(group_ids.shape)}; they must match"
        )
    check_finite("rewards", rewards.float())
    if rewards.numel() == 0:
        return {"uniform": 0.0, "all_correct": 0.0, "all_wrong": 0.0, "groups": 0}
    _, inverse = torch.unique(group_ids, return_inverse=True)
    n = int(inverse.max()) + 1
    r = rewards.to(torch.float64)
    gmax = torch.full((n,), float("-inf"), dtype=torch.float64, device=r.device).scatter_reduce(0, inverse, r, "amax")
    gmin = torch.full((n,), float("inf"), dtype=torch.float64, device=r.device).scatter_reduce(0, inverse, r, "amin")
    uniform = gmax == gmin  # (G,)
    return {
        "uniform": uniform.double().mean().item(),
        "all_correct": (uniform & (gmin >= 1)).double().mean().item(),
        "all_wrong": (uniform & (gmax <= 0)).double().mean().item(),
        "groups": n,
    }


def nonzero_advantage_fraction(advantages: torch.Tensor, tol: float = 1e-8) -> float:
    """Fraction of responses that carry a learning signal (|A| > tol)."""
    check_1d("advantages", advantages)
    if advantages.numel() == 0:
        return 0.0
    return (advantages.abs() > tol).double().mean().item()
