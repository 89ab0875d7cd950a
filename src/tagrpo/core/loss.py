"""The clipped PPO surrogate used by GRPO and TA-GRPO, with an optional k3 KL penalty.

  L = agg[ max(-A * rho_t, -A * clip(rho_t, 1 - clip_low, 1 + clip_high)) ] + beta * agg[k3_t]
  rho_t = exp(logp_t - old_logp_t),  k3_t = exp(ref_t - logp_t) - (ref_t - logp_t) - 1

TA-GRPO differs only in what the caller passes: logp / old_logp / ref_logp of every response are
computed on the ORIGINAL prompt q0 (anchored), and A is the family-normalized advantage.
Separate `clip_low` / `clip_high` give DAPO's clip-higher.
"""

from __future__ import annotations

import torch

from tagrpo.core._checks import check_choice, check_finite, check_same_shape

AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def aggregate(values: torch.Tensor, mask: torch.Tensor, agg: str = "token-mean", norm_len: int | None = None) -> torch.Tensor:
    """Reduce per-token values (B, T) under mask (B, T) to a scalar.

    token-mean: sum(values * mask) / sum(mask): every token of the batch weighs the same.
    seq-mean-token-mean: per-sequence masked mean, then mean over sequences that have tokens.
    seq-mean-token-sum-norm (Dr. GRPO): per-sequence masked sum / L, then mean over all B
      sequences; no length bias. L = `norm_len` (the trainer passes the response budget,
      max_new_tokens, so L does not depend on how rows are padded), or values.shape[1] if None.
    """
    check_choice("agg", agg, AGGREGATIONS)
    if norm_len is not None and norm_len < 1:
        raise ValueError(f"norm_len must be >= 1, got {norm_len}")
    m = mask.to(values.dtype)  # (B, T)
    if agg == "token-mean":
        return (values * m).sum() / m.sum().clamp(min=1)
    per_seq_sum = (values * m).sum(-1)  # (B,)
    if agg == "seq-mean-token-mean":
        n_tok = m.sum(-1)  # (B,)
        has = n_tok > 0
        per_seq = per_seq_sum[has] / n_tok[has]
        return per_seq.mean() if per_seq.numel() else per_seq_sum.sum() * 0
    return (per_seq_sum / (norm_len or values.shape[-1])).mean()


def _masked_mean(x: torch.Tensor, m: torch.Tensor) -> float:
    return ((x * m).sum() / m.sum().clamp(min=1)).item()


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    agg: str = "token-mean",
    ref_logp: torch.Tensor | None = None,
    beta: float = 0.0,
    norm_len: int | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped surrogate loss and its metrics.

    logp, old_logp, mask, ref_logp: (B, T); advantages: (B,). Returns (loss scalar with grad
    through logp, metrics with keys `loss/*`). `norm_len`: the L of seq-mean-token-sum-norm (see
    `aggregate`). `loss/clipfrac` counts exactly the tokens where the
    clipped branch is the one used (the gradient is cut there).
    """
    check_choice("agg", agg, AGGREGATIONS)
    if logp.dim() != 2:
        raise ValueError(f"logp must be 2-D (B, T), got shape {tuple(logp.shape)}")
    check_same_shape("logp", logp, old_logp=old_logp, mask=mask, ref_logp=ref_logp)
    if advantages.dim() != 1 or advantages.shape[0] != logp.shape[0]:
        raise ValueError(
            f"advantages must have shape (B,) = ({logp.shape[0]},), got {tuple(advantages.shape)}"
        )
    check_finite("advantages", advantages)
    if clip_low < 0 or clip_low >= 1 or clip_high < 0:
        raise ValueError(f"clip_low must be in [0, 1) and clip_high >= 0, got clip_low={clip_low}, clip_high={clip_high}")
    if beta < 0:
        raise ValueError(f"beta must be >= 0, got {beta}")
    if beta > 0 and ref_logp is None:
        raise ValueError("beta > 0 needs ref_logp (the reference model's log-probs); pass it or set beta=0")
    m = mask.to(logp.dtype)  # (B, T)
    if m.sum() <= 0:
        raise ValueError("mask has no tokens (all zeros): there is nothing to train on")

    adv = advantages.to(logp.dtype).unsqueeze(-1)  # (B, 1)
    # Padding holds whatever log-probs the model produced there (or a sentinel); zero the log
    # differences outside the mask so exp() cannot overflow into inf * 0 = NaN.
    live = m > 0  # (B, T)
    log_ratio = torch.where(live, logp - old_logp.detach(), torch.zeros_like(logp))  # (B, T)
    ratio = torch.exp(log_ratio)  # (B, T)
    ratio_c = ratio.clamp(1.0 - clip_low, 1.0 + clip_high)  # (B, T)
    pg_unclipped = -adv * ratio  # (B, T)
    pg_clipped = -adv * ratio_c  # (B, T)
    pg = torch.maximum(pg_unclipped, pg_clipped)  # (B, T)
    pg_loss = aggregate(pg, m, agg, norm_len)

    loss = pg_loss
    metrics: dict[str, float] = {}
    if ref_logp is not None:
        d = torch.where(live, ref_logp.detach() - logp, torch.zeros_like(logp))  # (B, T)
        kl = torch.exp(d) - d - 1.0  # (B, T) k3 estimator, >= 0
        kl_loss = aggregate(kl, m, agg, norm_len)
        loss = pg_loss + beta * kl_loss
        metrics["loss/kl"] = kl_loss.item()

    with torch.no_grad():
        clipped = (pg_clipped > pg_unclipped).to(m.dtype)  # (B, T) clipped branch active
        low = clipped * (ratio < 1.0 - clip_low).to(m.dtype)
        high = clipped * (ratio > 1.0 + clip_high).to(m.dtype)
        lr = log_ratio.detach()
        metrics.update(
            {
                "loss/policy": pg_loss.item(),
                "loss/total": loss.item(),
                "loss/clipfrac": _masked_mean(clipped, m),
                "loss/clipfrac_low": _masked_mean(low, m),
                "loss/clipfrac_high": _masked_mean(high, m),
                "loss/approx_kl": _masked_mean(torch.exp(lr) - 1.0 - lr, m),  # k3 of old -> current
                "loss/ratio_mean": _masked_mean(ratio.detach(), m),
                "loss/ratio_max": ratio.detach()[m.bool()].max().item(),
                "loss/tokens": m.sum().item(),
            }
        )
    return loss, metrics
