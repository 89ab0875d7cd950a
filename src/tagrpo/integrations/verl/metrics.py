"""Uniform-group diagnostics of a verl TA-GRPO batch (no verl import; numpy and torch only).

`family_uniform_metrics(uid, variant, scores)` gives what the TRL integration logs:
`uniform/q0_{uniform,all_correct,all_wrong}` (the plain GRPO view: q0's G rewards per family) and
`uniform/family_*` (the TA-GRPO view: all (N+1)*G rewards under the uid), plus
`rewards/q0_mean` and `rewards/neighbors_mean`. On verl the inputs are the batch's
`non_tensor_batch["uid"]`, `non_tensor_batch["ta_variant"]` (written by `TAGRPOAgentLoop`) and the
sequence scores (`batch["token_level_scores"].sum(-1)` or `batch["rm_scores"].sum(-1)`).

Logged every step by `python -m tagrpo.integrations.verl` (see `trainer.py`): verl 0.9.1 has no
metric hook an agent loop, its manager or a reward function can use, so tagrpo hands verl's
`run_ppo` its own task runner, whose trainer adds these keys to the step's `metrics` dict: on the
v1 trainer (all modes) from the step's TransferQueue rows (`trainer.uniform_metrics_from_kv`,
padding rows left out), on the legacy v0 `RayPPOTrainer` through `_update_actor`'s metrics
(`uniform_metrics_from_batch`). A run started some other way (verl's own `main_ppo`, a recipe with
its own task runner) does not log them; call `uniform_metrics_from_batch(batch)` there after the
reward step and merge the dict into `metrics`.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def family_uniform_metrics(uid: Any, variant: Any, scores: Any) -> dict[str, float]:
    """Uniform fractions per family (uid) and per q0 group (uid, variant 0), and mean rewards."""
    import torch

    from tagrpo.core import uniform_fraction

    uid = np.asarray(uid, dtype=object)
    variant = np.asarray(variant).astype(np.int64)
    scores = torch.as_tensor(np.asarray(scores, dtype=np.float64))
    _, family = np.unique(uid.astype(str), return_inverse=True)
    family = torch.as_tensor(family.reshape(-1), dtype=torch.long)
    q0 = torch.as_tensor(variant == 0)
    out: dict[str, float] = {}
    for view, rows in (("family", torch.ones_like(q0)), ("q0", q0)):
        fr = uniform_fraction(scores[rows], family[rows])
        out |= {f"uniform/{view}_{k}": float(fr[k]) for k in ("uniform", "all_correct", "all_wrong")}
    out["rewards/q0_mean"] = float(scores[q0].mean()) if bool(q0.any()) else float("nan")
    out["rewards/neighbors_mean"] = float(scores[~q0].mean()) if bool((~q0).any()) else float("nan")
    return out


def uniform_metrics_from_batch(batch: Any) -> dict[str, float]:
    """`family_uniform_metrics` of a verl `DataProto` (after the reward step)."""
    key = "token_level_scores" if "token_level_scores" in batch.batch else "rm_scores"
    scores = batch.batch[key].sum(-1).detach().cpu().numpy()
    return family_uniform_metrics(batch.non_tensor_batch["uid"], batch.non_tensor_batch["ta_variant"], scores)
