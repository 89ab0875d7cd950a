"""Token log-probabilities and entropies from logits, without materializing a full (B, T, V)
log-softmax copy in float32 when it can be avoided."""

from __future__ import annotations

import torch


def selective_log_softmax(logits: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[..., index] for logits (B, T, V) and index (B, T) -> (B, T) float32.

    Uses logsumexp per row (one (B, T) reduction) instead of a full log_softmax tensor.
    """
    logits = logits.float()
    picked = torch.gather(logits, -1, index.unsqueeze(-1)).squeeze(-1)  # (B, T)
    return picked - torch.logsumexp(logits, dim=-1)  # (B, T)


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the next-token distribution, (B, T, V) -> (B, T), in nats."""
    logits = logits.float()
    logp = torch.log_softmax(logits, dim=-1)  # (B, T, V)
    p = logp.exp()  # (B, T, V)
    # 0 * log 0 = 0: tokens masked to -inf (top-k, banned tokens) must not turn the sum (or its
    # gradient) into NaN
    logp = torch.where(p > 0, logp, torch.zeros_like(logp))  # (B, T, V)
    return -(p * logp).sum(-1)  # (B, T)
