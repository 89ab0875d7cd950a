"""Group-relative advantages, grouped by an explicit id array (never by row position).

GRPO: ids are per prompt, so each prompt's G rewards are normalized alone.
TA-GRPO: ids are per family (q0 and its N neighbors), so the (N+1)*G rewards are normalized
jointly; a family is uniform (all advantages 0) only if every variant is.
"""

from __future__ import annotations

import torch

from tagrpo.core._checks import check_1d, check_choice, check_finite

SCALES = ("group", "batch", "none")


def group_stats(rewards: torch.Tensor, group_ids: torch.Tensor):
    """Per-row group mean, Bessel-corrected group std (0 for a group of one) and group size."""
    _, inverse, counts = torch.unique(group_ids, return_inverse=True, return_counts=True)
    n_groups = counts.numel()
    r = rewards.to(torch.float64)  # (B,) float64: sums of many rewards stay exact enough
    sums = torch.zeros(n_groups, dtype=torch.float64, device=r.device).index_add_(0, inverse, r)
    mean = sums / counts  # (G,)
    dev = r - mean[inverse]  # (B,)
    sq = torch.zeros(n_groups, dtype=torch.float64, device=r.device).index_add_(0, inverse, dev * dev)
    denom = (counts - 1).clamp(min=1).to(torch.float64)
    std = torch.where(counts > 1, (sq / denom).sqrt(), torch.zeros_like(sq))  # (G,)
    return mean[inverse], std[inverse], counts[inverse], inverse


def group_advantages(
    rewards: torch.Tensor, group_ids: torch.Tensor, scale: str = "group", eps: float = 1e-6
) -> torch.Tensor:
    """A_i = (r_i - mean_g(r)) / (std_g(r) + eps) with g the group of row i.

    rewards: float (B,); group_ids: long (B,), any values (only equality matters).
    scale: "group" divides by the group's Bessel-corrected std plus eps; "batch" divides by the
    Bessel-corrected std of all B rewards plus eps (Dr. GRPO / REINFORCE++ style); "none" only
    centers. A group of one gets advantage 0. Returns float (B,) in rewards' dtype, detached from
    any graph the rewards belong to (advantages are constants of the loss).
    """
    check_choice("scale", scale, SCALES)
    check_1d("rewards", rewards)
    check_1d("group_ids", group_ids)
    if rewards.shape != group_ids.shape:
        raise ValueError(
            f"rewards has shape {tuple(rewards.shape)} but group_ids has shape {tuple(group_ids.shape)}; they must match"
        )
    rewards = rewards.detach()  # advantages are constants of the loss
    if not rewards.is_floating_point():
        rewards = rewards.float()
    if group_ids.is_floating_point():
        raise ValueError("group_ids must be an integer tensor (long), got a floating dtype")
    check_finite("rewards", rewards)
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    if rewards.numel() == 0:
        return rewards.clone()

    mean, std, counts, inverse = group_stats(rewards, group_ids)
    centered = rewards.to(torch.float64) - mean  # (B,)
    if scale == "group":
        adv = centered / (std + eps)
    elif scale == "batch":
        b = rewards.numel()
        batch_std = rewards.to(torch.float64).std(unbiased=True) if b > 1 else torch.zeros((), dtype=torch.float64)
        adv = centered / (batch_std + eps)
    else:
        adv = centered
    # A group of one teaches nothing, and a uniform group (all rewards equal) gets exactly 0:
    # its float mean can differ from the rewards by an ulp, which / eps would leave ~1e-10..1e-7.
    n_groups = int(inverse.max()) + 1
    r64 = rewards.to(torch.float64)  # (B,)
    gmax = torch.full((n_groups,), float("-inf"), dtype=torch.float64, device=r64.device).scatter_reduce(0, inverse, r64, "amax")
    gmin = torch.full((n_groups,), float("inf"), dtype=torch.float64, device=r64.device).scatter_reduce(0, inverse, r64, "amin")
    uniform = (gmax == gmin)[inverse]  # (B,)
    adv = torch.where((counts > 1) & ~uniform, adv, torch.zeros_like(adv))
    return adv.to(rewards.dtype)
