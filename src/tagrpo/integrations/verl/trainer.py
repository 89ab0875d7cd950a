"""tagrpo's hooks in verl 0.9.1's trainers (v1 and legacy v0): the uniform-group diagnostics in
the step metrics, and the per-variant advantage of `ta-grpo-separate` (`advantage.py`).

verl 0.9.1 has no metric hook that an agent loop, its manager or a reward function can use: the
v0 trainer merges only the manager's `timing` into the step, and the v1 trainer reads the rollout
through TransferQueue. What verl does offer is `verl.trainer.main_ppo.run_ppo(config,
task_runner_class)` ("for recipe to change TaskRunner"; verl's own one-step-off-policy and fully
async recipes use it). `python -m tagrpo.integrations.verl` calls it with a task runner of this
module, which differs from verl's only in the trainer class it ends up with (and in setting
`tagrpo.hooked_trainer`, which `ta-grpo-separate`'s agent loop demands, and wrapping verl's
advantage functions, `advantage.install_advantage_grouping`). Nothing of verl's `fit()` is copied:

- v1 (`trainer.use_v1=true`, the default; every `trainer.v1.trainer_mode`: sync, colocate_async,
  separate_async): `TAGRPOTaskRunnerV1.run` replaces, in its own Ray process, the registry entry
  of the configured mode (`verl.trainer.ppo.v1.trainer_base.TRAINER_REGISTRY`) by a subclass of the
  same trainer with `UniformMetricsV1Mixin` and `SeparateAdvantageV1Mixin` (which, for
  `ta-grpo-separate` only, runs verl's `_compute_advantage` grouped by uid and variant), then runs
  verl's `TaskRunnerV1.run`. The metrics mixin extends `_compute_metrics` (verl's "record
  metrics" step, called once per step with the whole step's batch, just before
  `logger.log(metrics)`): it reads `uid`, `rm_scores` and
  `extra_fields["ta_variant"]` of the step's non-padding rows from TransferQueue and adds
  `uniform_metrics_from_kv`. The mode name is kept (verl branches on it: "sync" vs async).
- v0 (`trainer.use_v1=false`, deprecated): verl's `main_ppo_v0.TaskRunner.run` builds the trainer
  by the module-global name `RayPPOTrainer`; `TAGRPOTaskRunner.run` rebinds that name, in its own
  Ray process, to `TAGRPORayPPOTrainer`, whose `_update_actor(batch)` (called by `fit` once per
  step after the reward and advantage steps, its `meta_info["metrics"]` merged into the step's
  metrics through `reduce_metrics`) adds `uniform_metrics_from_batch(batch)`. During critic
  warm-up (`trainer.critic_warmup` > step; 0 for GRPO) verl skips `_update_actor`, and so the
  diagnostics. For `ta-grpo-separate`, `fit` runs inside `advantage.per_variant_grouping()`, so
  its module-level `compute_advantage` call groups by uid and `ta_variant`; `_update_actor`
  checks that this step's advantage went through that grouping.

Keys added (as the TRL integration logs them; see `metrics.family_uniform_metrics`):
`uniform/q0_{uniform,all_correct,all_wrong}`, `uniform/family_{uniform,all_correct,all_wrong}`,
`rewards/q0_mean`, `rewards/neighbors_mean`. A batch without `ta_variant` (not produced by
`TAGRPOAgentLoop`) gets a warning once and no keys, rather than a failed step.
"""

from __future__ import annotations

import logging
from typing import Any

from tagrpo.integrations.verl._deps import TAGRPOVerlError, require_verl

require_verl("tagrpo.integrations.verl.trainer")

import numpy as np
import ray
import torch
from verl.trainer import main_ppo_v0
from verl.trainer.main_ppo import TaskRunnerV1
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.trainer.ppo.v1 import trainer_base

from tagrpo.integrations.verl.advantage import (
    SeparateAdvantageV1Mixin,
    check_applied,
    install_advantage_grouping,
    per_variant_grouping,
)
from tagrpo.integrations.verl.metrics import family_uniform_metrics, uniform_metrics_from_batch
from tagrpo.integrations.verl.settings import HOOKED_KEY, TASettings

__all__ = [
    "TAGRPORayPPOTrainer",
    "TAGRPOTaskRunner",
    "TAGRPOTaskRunnerV1",
    "UniformMetricsV1Mixin",
    "install_v0_trainer",
    "install_v1_trainer",
    "mark_hooked",
    "task_runner_class",
    "uniform_metrics_from_kv",
]

logger = logging.getLogger(__name__)
_warned: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        logger.warning(message)


# ------------------------------------------------------------------------------------------
# v1: the step's rows from TransferQueue
# ------------------------------------------------------------------------------------------

#: TransferQueue fields the v1 hook reads (written by verl's AgentLoopWorkerTQ: `uid` from the
#: prompt, `rm_scores` from the reward, `extra_fields` from the agent loop's output).
KV_FIELDS = ["uid", "rm_scores", "extra_fields"]


def uniform_metrics_from_kv(batch: Any, kv_batch_get: Any = None) -> dict[str, float]:
    """`family_uniform_metrics` of a v1 step: `batch` is verl's `KVBatchMeta` (keys, tags,
    partition_id), `kv_batch_get` TransferQueue's (default `transfer_queue.kv_batch_get`). Padding
    rows (tag `is_padding`) are left out, as verl's own data metrics do. The score of a row is
    the sum of its `rm_scores` (verl's `token_level_scores` in v1)."""
    if kv_batch_get is None:
        import transfer_queue as tq

        kv_batch_get = tq.kv_batch_get
    keep = np.array([not tag.get("is_padding", False) for tag in batch.tags], dtype=bool)
    if not keep.any():
        return {}
    data = kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=KV_FIELDS)
    extra = list(data.get("extra_fields").tolist())
    variant = [e.get("ta_variant") if isinstance(e, dict) else None for e in extra]
    if any(v is None for v in variant):
        _warn_once("v1", "tagrpo: no `ta_variant` in the rollout's extra_fields (not TAGRPOAgentLoop?); "
                         "uniform/* metrics are not logged")
        return {}
    uid = np.array(list(data.get("uid").tolist()), dtype=object)
    scores = torch.stack([row.sum() for row in data.get("rm_scores").unbind(0)]).to(torch.float64)
    return family_uniform_metrics(uid[keep], np.asarray(variant)[keep], scores.numpy()[keep])


class UniformMetricsV1Mixin:
    """For a verl v1 `PPOTrainer` subclass: `_compute_metrics` also records the uniform-group
    diagnostics of the step (the whole step's rows, all `parameter_sync_step` sub-batches)."""

    def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
        out = super()._compute_metrics(batch, metrics, timing_raw, global_steps, epoch)
        metrics.update(uniform_metrics_from_kv(batch))
        return out


_V1_CLASSES: dict[type, type] = {}


def with_uniform_metrics(trainer_cls: type) -> type:
    """`trainer_cls` (a verl v1 `PPOTrainer` subclass) with `UniformMetricsV1Mixin` and
    `SeparateAdvantageV1Mixin`; one class per base, cached."""
    if issubclass(trainer_cls, UniformMetricsV1Mixin):
        return trainer_cls
    if trainer_cls not in _V1_CLASSES:
        bases = (UniformMetricsV1Mixin, SeparateAdvantageV1Mixin, trainer_cls)
        _V1_CLASSES[trainer_cls] = type(f"TAGRPO{trainer_cls.__name__}", bases, {"__module__": __name__})
    return _V1_CLASSES[trainer_cls]


def install_v1_trainer(mode: str) -> type:
    """Make verl's `get_trainer_cls(mode)` (what `TaskRunnerV1.run` instantiates) return the
    registered trainer of `mode` with tagrpo's hooks; return that class. The registry entry and
    verl's advantage functions are replaced in this process only (the task runner's Ray actor)."""
    install_advantage_grouping()
    cls = with_uniform_metrics(trainer_base.get_trainer_cls(mode))
    trainer_base.TRAINER_REGISTRY[mode] = cls
    return cls


def mark_hooked(config: Any) -> None:
    """Set `tagrpo.hooked_trainer=true` in `config` (before verl builds trainer and workers from
    it): the agent loop of `ta-grpo-separate` runs only under tagrpo's hooked trainer."""
    from omegaconf import OmegaConf

    OmegaConf.update(config, HOOKED_KEY, True, force_add=True)


class _TaskRunnerV1Body(TaskRunnerV1.__ray_actor_class__):
    """verl's `TaskRunnerV1` whose trainer has tagrpo's hooks."""

    def run(self, config):
        mark_hooked(config)
        install_v1_trainer(str(config.trainer.v1.trainer_mode))
        return super().run(config)


TAGRPOTaskRunnerV1 = ray.remote(_TaskRunnerV1Body)


# ------------------------------------------------------------------------------------------
# v0: the legacy RayPPOTrainer
# ------------------------------------------------------------------------------------------


class TAGRPORayPPOTrainer(RayPPOTrainer):
    """verl's v0 `RayPPOTrainer`; `_update_actor`'s metrics also hold the uniform-group
    diagnostics of the batch (`fit` merges them into the step's metrics); for `ta-grpo-separate`
    `fit` runs with the advantage grouped by uid and variant."""

    def fit(self):
        if not TASettings.from_config(self.config).per_variant_advantage:
            return super().fit()
        install_advantage_grouping()
        with per_variant_grouping():
            return super().fit()

    def _update_actor(self, batch):
        check_applied()  # ta-grpo-separate: this step's advantage was grouped per variant
        output = super()._update_actor(batch)
        if "ta_variant" not in batch.non_tensor_batch:
            _warn_once("v0", "tagrpo: no `ta_variant` in the batch (not TAGRPOAgentLoop?); "
                             "uniform/* metrics are not logged")
            return output
        extra = uniform_metrics_from_batch(batch)
        # verl reduces each entry of meta_info["metrics"] with np.mean/max/min: one-element lists
        output.meta_info.setdefault("metrics", {}).update({k: [v] for k, v in extra.items()})
        return output


def install_v0_trainer() -> type:
    """Make verl's `main_ppo_v0.TaskRunner.run` build `TAGRPORayPPOTrainer` (it instantiates the
    module-global name `RayPPOTrainer`) and wrap verl's advantage functions; in this process only
    (the task runner's Ray actor)."""
    current = getattr(main_ppo_v0, "RayPPOTrainer", None)
    if not (isinstance(current, type) and issubclass(current, RayPPOTrainer)):
        raise TAGRPOVerlError(
            "verl's main_ppo_v0 no longer builds its trainer through `RayPPOTrainer`; this tagrpo "
            "version supports verl 0.9.1 only"
        )
    install_advantage_grouping()
    main_ppo_v0.RayPPOTrainer = TAGRPORayPPOTrainer
    return TAGRPORayPPOTrainer


class _TaskRunnerV0Body(main_ppo_v0.TaskRunner.__ray_actor_class__):
    """verl's legacy `TaskRunner` whose trainer has tagrpo's hooks."""

    def run(self, config):
        mark_hooked(config)
        install_v0_trainer()
        return super().run(config)


TAGRPOTaskRunner = ray.remote(_TaskRunnerV0Body)


def task_runner_class(config: Any):
    """The task runner `run_ppo` gets for `config`: `TAGRPOTaskRunnerV1` unless
    `trainer.use_v1=false`, then `TAGRPOTaskRunner` (as verl's `main_ppo.main` picks
    `TaskRunnerV1` or `main_ppo_v0.TaskRunner`)."""
    return TAGRPOTaskRunnerV1 if bool(config.trainer.use_v1) else TAGRPOTaskRunner
