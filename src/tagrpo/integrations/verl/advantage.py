"""`ta-grpo-separate` on verl 0.9.1: verl's own `grpo` advantage grouped by (uid, variant).

The separate ablation samples and anchors like `ta-grpo` but normalizes each variant's G rewards
alone (q0's G, each q_n's G) instead of the family's (N+1)*G. verl keys every trajectory by the
prompt's uid (TransferQueue keys `{uid}_{session}_{i}`, the replay buffer, DAPO group filtering,
the rollout dumps), so the uid itself is left alone: only inside verl's advantage function does
the grouping index become `{uid}#ta{variant}` (`per_variant_uids`), and the batch's uid is put
back as soon as the function returns. Nothing of verl's `fit()` or `_compute_advantage` is copied.

How it reaches that function (both are installed by `trainer.py`'s task runners, in the task
runner's Ray process; both are no-ops for every other algorithm):

- `install_advantage_grouping()` replaces the two module-global names through which verl's
  trainers call the advantage: `verl.trainer.ppo.ray_trainer.compute_advantage` (what the legacy
  v0 `RayPPOTrainer.fit` calls) and `verl.trainer.ppo.v1.trainer_base.
  compute_advantage_for_multi_trajectories` (what v1's `PPOTrainer._compute_advantage` calls).
  The wrapper regroups only while a `per_variant_grouping(...)` context is active.
- v1 (`SeparateAdvantageV1Mixin`): `_compute_advantage(batch)` reads the rows' `ta_variant` from
  TransferQueue (`extra_fields`, in `batch.keys` order, the order verl reads the rows in; padding
  rows keep their own uid) and runs verl's method inside the context.
- v0 (`TAGRPORayPPOTrainer.fit` in `trainer.py`): the whole of verl's `fit` runs inside the
  context; the wrapper reads `non_tensor_batch["ta_variant"]`, which the agent loop wrote.

Both fail loudly rather than train the wrong ablation: v1 when verl's method did not pass through
the wrapper, v0 when a step reaches `_update_actor` without it (`check_applied`).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from typing import Any

from tagrpo.integrations.verl._deps import TAGRPOVerlError, require_verl

require_verl("tagrpo.integrations.verl.advantage")

import numpy as np
from verl.trainer.ppo import ray_trainer
from verl.trainer.ppo.v1 import trainer_base

from tagrpo.integrations.verl.settings import TASettings

__all__ = [
    "SeparateAdvantageV1Mixin",
    "install_advantage_grouping",
    "per_variant_grouping",
    "per_variant_uids",
    "variants_from_kv",
]

SEPARATOR = "#ta"


def per_variant_uids(uid: Any, variant: Any) -> np.ndarray:
    """The grouping index of the separate ablation: `{uid}#ta{variant}` per row (object array);
    a row whose variant is None (a padding row) keeps its uid."""
    uid = list(np.asarray(uid, dtype=object).reshape(-1))
    variant = list(variant)
    if len(uid) != len(variant):
        raise TAGRPOVerlError(f"{len(uid)} uids but {len(variant)} ta_variant values")
    out = np.empty(len(uid), dtype=object)
    out[:] = [u if v is None else f"{u}{SEPARATOR}{int(v)}" for u, v in zip(uid, variant)]
    return out


class _Grouping:
    """One active regrouping: `variants` per row (v1), or None to read the batch's `ta_variant`
    (v0); `applied` counts the advantage calls regrouped, `checked` what `check_applied` saw."""

    def __init__(self, variants: list | None):
        self.variants, self.applied, self.checked = variants, 0, 0

    def index(self, data) -> np.ndarray:
        variants = self.variants
        if variants is None:
            if "ta_variant" not in data.non_tensor_batch:
                raise TAGRPOVerlError(
                    "tagrpo.algorithm=ta-grpo-separate: the batch has no `ta_variant` (written by "
                    "TAGRPOAgentLoop), so the advantage cannot be grouped per variant"
                )
            variants = data.non_tensor_batch["ta_variant"].tolist()
        return per_variant_uids(data.non_tensor_batch["uid"], variants)


_GROUPING: contextvars.ContextVar[_Grouping | None] = contextvars.ContextVar("tagrpo_grouping", default=None)


@contextlib.contextmanager
def per_variant_grouping(variants: list | None = None):
    """Inside: verl's advantage functions (once installed) group rows by (uid, variant)."""
    grouping = _Grouping(variants)
    token = _GROUPING.set(grouping)
    try:
        yield grouping
    finally:
        _GROUPING.reset(token)


def check_applied() -> None:
    """Raise unless the advantage was regrouped since the last check (no-op outside a grouping)."""
    grouping = _GROUPING.get()
    if grouping is None:
        return
    if grouping.applied == grouping.checked:
        raise TAGRPOVerlError(
            "tagrpo.algorithm=ta-grpo-separate: verl computed this step's advantage without "
            "tagrpo's per-variant grouping (verl's trainer no longer calls "
            "`ray_trainer.compute_advantage`?); this tagrpo version supports verl 0.9.1 only"
        )
    grouping.checked = grouping.applied


def _regrouping(original):
    @functools.wraps(original)
    def advantage(data, *args, **kwargs):
        grouping = _GROUPING.get()
        if grouping is None:
            return original(data, *args, **kwargs)
        uid = data.non_tensor_batch["uid"]
        data.non_tensor_batch["uid"] = grouping.index(data)
        try:
            out = original(data, *args, **kwargs)
        finally:
            data.non_tensor_batch["uid"] = uid  # everything after the advantage sees the uid
        grouping.applied += 1
        return out

    advantage.__tagrpo_original__ = original
    return advantage


def install_advantage_grouping() -> None:
    """Wrap verl's two advantage entry points (see the module docstring); idempotent, in this
    process only (the task runner's Ray actor)."""
    targets = ((ray_trainer, "compute_advantage"), (trainer_base, "compute_advantage_for_multi_trajectories"))
    for module, name in targets:
        current = getattr(module, name, None)
        if current is None:
            raise TAGRPOVerlError(
                f"verl's {module.__name__} has no `{name}`; this tagrpo version supports verl 0.9.1 only"
            )
        if not hasattr(current, "__tagrpo_original__"):
            setattr(module, name, _regrouping(current))


def variants_from_kv(batch: Any, kv_batch_get: Any = None) -> list:
    """`ta_variant` of each row of a v1 `KVBatchMeta`, in `batch.keys` order; None for padding
    rows (tag `is_padding`, their own uid). A real row without it raises."""
    if kv_batch_get is None:
        import transfer_queue as tq

        kv_batch_get = tq.kv_batch_get
    data = kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields"])
    extra = list(data.get("extra_fields").tolist())
    out = []
    for key, tag, fields in zip(batch.keys, batch.tags, extra):
        variant = fields.get("ta_variant") if isinstance(fields, dict) else None
        if tag.get("is_padding", False):
            variant = None
        elif variant is None:
            raise TAGRPOVerlError(
                f"tagrpo.algorithm=ta-grpo-separate: row {key} has no `ta_variant` in its extra_fields "
                "(not generated by TAGRPOAgentLoop?), so the advantage cannot be grouped per variant"
            )
        out.append(variant)
    return out


class SeparateAdvantageV1Mixin:
    """For a verl v1 `PPOTrainer` subclass: with `tagrpo.algorithm=ta-grpo-separate`, verl's
    `_compute_advantage` groups by (uid, variant); otherwise it runs unchanged."""

    def _compute_advantage(self, batch, metrics):
        if not TASettings.from_config(self.config).per_variant_advantage:
            return super()._compute_advantage(batch, metrics)
        install_advantage_grouping()
        with per_variant_grouping(variants_from_kv(batch)) as grouping:
            out = super()._compute_advantage(batch, metrics)
        if grouping.applied != 1:
            raise TAGRPOVerlError(
                "tagrpo.algorithm=ta-grpo-separate: verl's _compute_advantage did not call "
                "`compute_advantage_for_multi_trajectories`; this tagrpo version supports verl 0.9.1 only"
            )
        return out
