"""`tagrpo.algorithm=ta-grpo-separate` on verl: verl's own grpo advantage grouped by (uid, variant).

Runs in the verl environment (`make test-verl`). What is real: verl 0.9.1's v1
`PPOTrainer._compute_advantage` (TransferQueue read, `compute_advantage_for_multi_trajectories`,
`compute_grpo_outcome_advantage`, the write back), verl's `ray_trainer.compute_advantage` as the
legacy `fit` calls it, `DataProto`, `KVBatchMeta`, the trainer registry. What is fake: TransferQueue
(the in-memory `FakeTQ` of tests/test_verl_metrics_logged.py), verl's `fit` (a probe that makes
the calls verl 0.9.1's `fit` makes around the advantage, checked against its source below), Ray.
"""

from __future__ import annotations

import ast
import inspect
import os

import numpy as np
import pytest

if os.environ.get("TAGRPO_REQUIRE_VERL") == "1":
    import verl  # noqa: F401  (a missing verl must fail, not skip, under `make test`)
else:
    pytest.importorskip("verl")

import torch
from test_verl_metrics_logged import (
    SCORES,
    VARIANTS,
    FakeActorGroup,
    compose,
    fake_tq,
    registry,
    v0_batch,
    v1_step_batch,
)

from tagrpo.core import group_advantages
from tagrpo.integrations.verl._deps import TAGRPOVerlError
from tagrpo.integrations.verl.settings import V0_MANAGER

__all__ = ["fake_tq", "registry"]  # fixtures shared with test_verl_metrics_logged.py

N_VARIANTS = 3  # N = 2 neighbors in the composed config, so variants 0..2


def expected(uid, variant, scores) -> dict[str, torch.Tensor]:
    """tagrpo.core.group_advantages per family (ta-grpo) and per (family, variant) (separate)."""
    _, family = np.unique(np.asarray(uid, dtype=str), return_inverse=True)
    family = torch.as_tensor(family.reshape(-1), dtype=torch.long)
    variant = torch.as_tensor(np.asarray(variant, dtype=np.int64))
    rewards = torch.as_tensor(np.asarray(scores, dtype=np.float32))
    return {
        "ta-grpo": group_advantages(rewards, family, scale="group"),
        "ta-grpo-separate": group_advantages(rewards, family * N_VARIANTS + variant, scale="group"),
    }


# ------------------------------------------------------------------------------------------
# v1: verl's PPOTrainerSync._compute_advantage through the mixin, TransferQueue in memory
# ------------------------------------------------------------------------------------------


def v1_trainer(algorithm: str):
    from tagrpo.integrations.verl.trainer import install_v1_trainer

    cls = install_v1_trainer("sync")
    trainer = cls.__new__(cls)
    trainer.config = compose(f"tagrpo.algorithm={algorithm}")
    trainer.use_critic = False
    return trainer


def v1_advantages(fake_tq, batch) -> tuple[list, torch.Tensor]:
    """(keys, first-token advantage) of the real rows, as verl wrote them back to TransferQueue."""
    real = [k for k, t in zip(batch.keys, batch.tags) if not t.get("is_padding", False)]
    adv = torch.stack([fake_tq.rows[k]["advantages"][0] for k in real]).to(torch.float32)
    for k in real:  # verl broadcasts the sequence's advantage over its response tokens
        row = fake_tq.rows[k]["advantages"]
        assert torch.allclose(row, row[0].expand_as(row))
    return real, adv


@pytest.mark.parametrize("algorithm", ["ta-grpo", "ta-grpo-separate"])
def test_v1_advantage_is_verls_grpo_over_family_or_per_variant(fake_tq, registry, algorithm):
    trainer = v1_trainer(algorithm)
    batch = v1_step_batch(fake_tq)
    uid_before = {k: fake_tq.rows[k]["uid"] for k in batch.keys}
    trainer._compute_advantage(batch, {})
    keys, adv = v1_advantages(fake_tq, batch)

    rows = [fake_tq.rows[k] for k in keys]
    want = expected([r["uid"] for r in rows], [r["extra_fields"]["ta_variant"] for r in rows],
                    [float(r["rm_scores"].sum()) for r in rows])
    other = "ta-grpo" if algorithm == "ta-grpo-separate" else "ta-grpo-separate"
    assert torch.allclose(adv, want[algorithm], atol=1e-5)
    assert not torch.allclose(adv, want[other], atol=1e-3)
    # TransferQueue keeps every row's uid and keys (replay, dumps, metrics read them)
    assert {k: fake_tq.rows[k]["uid"] for k in batch.keys} == uid_before
    assert list(fake_tq.rows) == list(uid_before)


def test_v1_separate_expected_values_by_hand(fake_tq, registry):
    """famA = [1, 1 | 1, 0 | 0, 0]: per variant q0 and q2 are uniform (0), q1 is +-1/std."""
    trainer = v1_trainer("ta-grpo-separate")
    batch = v1_step_batch(fake_tq)
    trainer._compute_advantage(batch, {})
    _, adv = v1_advantages(fake_tq, batch)
    s = 1 / (np.std([1, 0], ddof=1) + 1e-6) * 0.5
    assert adv[:6].tolist() == pytest.approx([0, 0, s, -s, 0, 0], abs=1e-5)
    assert SCORES["famA"] == [1, 1, 1, 0, 0, 0] and VARIANTS == [0, 0, 1, 1, 2, 2]


def test_v1_separate_refuses_rows_without_variant_and_a_verl_that_skips_the_hook(fake_tq, registry, monkeypatch):
    trainer = v1_trainer("ta-grpo-separate")
    batch = v1_step_batch(fake_tq)
    fake_tq.rows[batch.keys[3]]["extra_fields"] = {}
    with pytest.raises(TAGRPOVerlError, match="no `ta_variant`"):
        trainer._compute_advantage(batch, {})

    batch = v1_step_batch(fake_tq)  # fresh rows
    monkeypatch.setattr(registry.PPOTrainer, "_compute_advantage", lambda self, batch, metrics: batch)
    with pytest.raises(TAGRPOVerlError, match="did not call"):
        trainer._compute_advantage(batch, {})


def test_v1_separate_padding_rows_keep_their_uid(fake_tq, registry):
    from tagrpo.integrations.verl.advantage import per_variant_uids, variants_from_kv

    batch = v1_step_batch(fake_tq)
    variants = variants_from_kv(batch)
    assert variants == VARIANTS * 2 + [None, None]  # the padding copies hold row 0's ta_variant
    uids = per_variant_uids([fake_tq.rows[k]["uid"] for k in batch.keys], variants)
    assert list(uids[:3]) == ["famA#ta0", "famA#ta0", "famA#ta1"] and list(uids[-2:]) == ["padfeed"] * 2


# ------------------------------------------------------------------------------------------
# v0: TAGRPORayPPOTrainer.fit around verl's module-level compute_advantage
# ------------------------------------------------------------------------------------------


def v0_probe_fit(calls_advantage: bool = True):
    """The calls verl 0.9.1's RayPPOTrainer.fit makes around the advantage (checked below):
    the module-level `compute_advantage` looked up in `ray_trainer`, then `self._update_actor`."""

    def fit(self):
        from verl.trainer.ppo import ray_trainer

        batch = v0_batch()
        uid = batch.non_tensor_batch["uid"].copy()
        if calls_advantage:
            batch = ray_trainer.compute_advantage(batch, adv_estimator=self.config.algorithm.adv_estimator,
                                                  num_repeat=self.config.actor_rollout_ref.rollout.n,
                                                  config=self.config.algorithm)
        assert list(batch.non_tensor_batch["uid"]) == list(uid)  # restored for everything after
        self._update_actor(batch)
        return batch

    return fit


def v0_trainer(algorithm: str):
    from tagrpo.integrations.verl.trainer import TAGRPORayPPOTrainer

    trainer = TAGRPORayPPOTrainer.__new__(TAGRPORayPPOTrainer)
    trainer.config = compose(f"tagrpo.algorithm={algorithm}", "trainer.use_v1=false",
                             f"actor_rollout_ref.rollout.agent.agent_loop_manager_class={V0_MANAGER}")
    trainer.actor_rollout_wg = FakeActorGroup()
    return trainer


@pytest.mark.parametrize("algorithm", ["ta-grpo", "ta-grpo-separate"])
def test_v0_fit_advantage_is_verls_grpo_over_family_or_per_variant(registry, monkeypatch, algorithm):
    from verl.trainer import main_ppo_v0
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    from tagrpo.integrations.verl.trainer import install_v0_trainer

    monkeypatch.setattr(RayPPOTrainer, "fit", v0_probe_fit())
    monkeypatch.setattr(main_ppo_v0, "RayPPOTrainer", RayPPOTrainer)  # restored after the test
    install_v0_trainer()  # as the task runner does: wraps ray_trainer.compute_advantage
    trainer = v0_trainer(algorithm)
    batch = trainer.fit()

    nt = batch.non_tensor_batch
    scores = batch.batch["token_level_scores"].sum(-1)
    want = expected(nt["uid"], nt["ta_variant"], scores)
    adv = batch.batch["advantages"][:, 0]
    other = "ta-grpo" if algorithm == "ta-grpo-separate" else "ta-grpo-separate"
    assert torch.allclose(adv, want[algorithm], atol=1e-5)
    assert not torch.allclose(adv, want[other], atol=1e-3)
    assert len(trainer.actor_rollout_wg.updates) == 1


def test_v0_separate_fails_when_verls_fit_does_not_reach_the_hook(registry, monkeypatch):
    from verl.trainer.ppo import ray_trainer
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    from tagrpo.integrations.verl.advantage import install_advantage_grouping, per_variant_grouping

    install_advantage_grouping()
    monkeypatch.setattr(RayPPOTrainer, "fit", v0_probe_fit(calls_advantage=False))
    with pytest.raises(TAGRPOVerlError, match="without tagrpo's per-variant grouping"):
        v0_trainer("ta-grpo-separate").fit()
    assert v0_trainer("ta-grpo").fit() is not None  # other algorithms: no grouping, no check

    batch = v0_batch()  # a batch not from TAGRPOAgentLoop
    batch.non_tensor_batch.pop("ta_variant")
    with pytest.raises(TAGRPOVerlError, match="no `ta_variant`"), per_variant_grouping():
        ray_trainer.compute_advantage(batch, adv_estimator="grpo")


def test_verl_trainers_call_the_wrapped_advantage_names():
    """The hook works because verl 0.9.1's trainers look these names up in their modules at call
    time: `fit` (v0) calls `compute_advantage`, `_compute_advantage` (v1) calls
    `compute_advantage_for_multi_trajectories`, each once, as plain names."""
    from verl.trainer.ppo import ray_trainer
    from verl.trainer.ppo.v1 import trainer_base

    def plain_calls(func) -> list[str]:
        tree = ast.parse(inspect.getsource(func).lstrip().replace("\n    ", "\n"))
        return [n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]

    assert plain_calls(ray_trainer.RayPPOTrainer.fit).count("compute_advantage") == 1
    assert plain_calls(trainer_base.PPOTrainer._compute_advantage).count("compute_advantage_for_multi_trajectories") == 1


# ------------------------------------------------------------------------------------------
# config: accepted, anchored, rollout.n = (N+1)*G; the agent loop demands tagrpo's trainer
# ------------------------------------------------------------------------------------------


def test_check_config_accepts_separate_as_an_anchored_family_of_n_plus_one_times_g():
    from tagrpo.integrations.verl.settings import check_config

    ta = check_config(compose("tagrpo.algorithm=ta-grpo-separate"))
    assert (ta.family_size, ta.anchored, ta.per_variant_advantage) == (6, True, True)
    assert compose("tagrpo.algorithm=ta-grpo-separate").actor_rollout_ref.rollout.n == 6
    assert not check_config(compose()).per_variant_advantage
    with pytest.raises(TAGRPOVerlError, match="calculate_log_probs=false"):  # anchored: on q0
        check_config(compose("tagrpo.algorithm=ta-grpo-separate", "actor_rollout_ref.rollout.calculate_log_probs=true"))


def test_check_hooked_refuses_separate_under_a_trainer_tagrpo_did_not_build():
    from omegaconf import OmegaConf

    from tagrpo.integrations.verl.settings import TASettings, check_hooked

    cfg = compose("tagrpo.algorithm=ta-grpo-separate")
    with pytest.raises(TAGRPOVerlError, match="python -m tagrpo.integrations.verl"):
        check_hooked(cfg, TASettings.from_config(cfg))
    OmegaConf.update(cfg, "tagrpo.hooked_trainer", True, force_add=True)
    check_hooked(cfg, TASettings.from_config(cfg))
    plain = compose()
    check_hooked(plain, TASettings.from_config(plain))  # ta-grpo runs under any trainer
