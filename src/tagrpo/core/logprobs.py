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


def token_entropy(logits: torch.Tensor, chunk_rows: int = 64) -> torch.Tensor:
    """Entropy of the next-token distribution, (B, T, V) -> (B, T), in nats.

    Computed `chunk_rows` positions at a time, so the float32 temporaries (log-softmax, its
    exp, their product) of a chunk stay in cache instead of each making a pass over a
    (B, T, V) tensor in memory (a few hundred MB for a 49k vocabulary). Differentiable."""
    shape = logits.shape[:-1]
    flat = logits.reshape(-1, logits.shape[-1])  # (B*T, V)
    if flat.shape[0] == 0:
        return torch.zeros(shape, dtype=torch.float32, device=logits.device)
    return torch.cat([_entropy_rows(c) for c in flat.split(chunk_rows)]).reshape(shape)


def _entropy_rows(logits: torch.Tensor) -> torch.Tensor:
    logp = torch.log_softmax(logits.float(), dim=-1)  # (n, V)
    p = logp.exp()  # (n, V)
    # 0 * log 0 = 0: tokens masked to -inf (top-k, banned tokens) must not turn the sum (or its
    # gradient) into NaN
    return -(p * torch.where(p > 0, logp, 0.0)).sum(-1)  # (n,)
