"""The uniform-group diagnostics reach verl's step metrics (`tagrpo.integrations.verl.trainer`).

Runs in the verl environment (`make test-verl`), like tests/test_verl_integration.py. What is
real: verl 0.9.1's trainer classes and their methods that run in one step's tail (v1:
`PPOTrainer._compute_advantage` and `_compute_metrics`, the latter producing verl's own
`critic/*`, `response_length/*` ... keys; v0: `RayPPOTrainer._update_actor` and verl's
`reduce_metrics`, as `fit` applies it), `AgentLoopOutput.as_dict` (the TransferQueue row layout),
verl's `list_of_dict_to_tensordict`, `KVBatchMeta`, `DataProto`, the trainer registry and the
task-runner classes. What is fake: TransferQueue (an in-memory dict behind `kv_batch_get` /
`kv_batch_put`), the actor worker group (returns fixed metrics), Ray (not started).
"""

from __future__ import annotations

import ast
import inspect
import os
import subprocess
import sys

import numpy as np
import pytest

if os.environ.get("TAGRPO_REQUIRE_VERL") == "1":
    import verl  # noqa: F401  (a missing verl must fail, not skip, under `make test`)
else:
    pytest.importorskip("verl")

import torch
from omegaconf import OmegaConf

from tagrpo.integrations.verl.settings import V0_MANAGER, register_resolvers

# Two families of N=2 neighbors, G=2 (rollout.n = 6): sessions 0,1 -> q0, 2,3 -> q1, 4,5 -> q2.
VARIANTS = [0, 0, 1, 1, 2, 2]
SCORES = {"famA": [1, 1, 1, 0, 0, 0], "famB": [0, 0, 0, 0, 1, 0]}
# q0 view: famA all correct, famB all wrong. Family view: famA mixed, famB mixed.
EXPECTED = {
    "uniform/q0_uniform": 1.0,
    "uniform/q0_all_correct": 0.5,
    "uniform/q0_all_wrong": 0.5,
    "uniform/family_uniform": 0.0,
    "uniform/family_all_correct": 0.0,
    "uniform/family_all_wrong": 0.0,
    "rewards/q0_mean": 0.5,  # (1 + 1 + 0 + 0) / 4
    "rewards/neighbors_mean": 2 / 8,  # famA: 1, 0, 0, 0; famB: 0, 0, 1, 0
}
UNIFORM_KEYS = sorted(EXPECTED)


def compose(*overrides: str):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    import tagrpo.integrations.verl as tv

    register_resolvers()
    config_dir = os.path.join(os.path.dirname(tv.__file__), "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        cfg = hydra_compose(
            "tagrpo_trainer",
            overrides=["tagrpo.num_neighbors=2", "tagrpo.samples_per_variant=2", *overrides],
        )
    OmegaConf.resolve(cfg)
    return cfg


def assert_uniform(metrics: dict) -> None:
    for key, want in EXPECTED.items():
        assert key in metrics, key
        assert float(metrics[key]) == pytest.approx(want), key


# ------------------------------------------------------------------------------------------
# v1: one step's tail on verl's PPOTrainerSync with the hook, TransferQueue in memory
# ------------------------------------------------------------------------------------------


class FakeTQ:
    """TransferQueue's kv interface over a dict: rows stored as verl's AgentLoopWorkerTQ writes
    them, each field of a get packed by TransferQueue's own `AsyncSimpleStorageManager._pack_field_values`
    (jagged nested tensors, dense scalars, NonTensorStack). A field no row holds is left out of a
    get (verl asks for `values` without a critic)."""

    def __init__(self):
        self.rows: dict[str, dict] = {}
        self.tags: dict[str, dict] = {}
        self.gets: list[list[str]] = []

    def kv_batch_get(self, keys, partition_id, select_fields=None):
        from tensordict import TensorDict
        from transfer_queue.storage.managers.simple_storage_manager import AsyncSimpleStorageManager

        rows = [self.rows[k] for k in keys]
        fields = [f for f in select_fields if all(f in r for r in rows)]
        self.gets.append(fields)
        pack = AsyncSimpleStorageManager._pack_field_values
        return TensorDict({f: pack([r[f] for r in rows]) for f in fields}, batch_size=[len(rows)])

    def kv_batch_put(self, keys, partition_id, fields, tags=None):
        from transfer_queue.metadata import KVBatchMeta

        for i, key in enumerate(keys):
            for name in fields.keys():  # noqa: SIM118  (iterating a TensorDict yields rows)
                self.rows[key][name] = fields[name][i]
        return KVBatchMeta(keys=list(keys), tags=[self.tags[k] for k in keys], partition_id=partition_id)


def v1_step_batch(tq):
    """Rows of two families as `AgentLoopWorkerTQ._agent_loop_postprocess` stores them (key
    `{uid}_{session}_0`, AgentLoopOutput.as_dict + uid/session_id, reward at the last token),
    plus two synthetic padding rows as verl's `upsample_batch_to_divisible_size` adds them."""
    from transfer_queue.metadata import KVBatchMeta
    from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput

    keys = []
    for uid, scores in SCORES.items():
        for session, (variant, score) in enumerate(zip(VARIANTS, scores)):
            n_prompt, n_resp = 4 - session % 2, 3 + session  # ragged, as TransferQueue holds them
            out = AgentLoopOutput(
                prompt_ids=[5, 6, 7, 8][:n_prompt], response_ids=list(range(10, 10 + n_resp)),
                response_mask=[1] * n_resp, reward_score=float(score), num_turns=2,
                metrics=AgentLoopMetrics(), extra_fields={"ta_variant": variant},
            )
            row = out.as_dict()
            row.update(uid=uid, session_id=session)
            key = f"{uid}_{session}_0"
            keys.append(key)
            tq.rows[key] = row
            tq.tags[key] = {"status": "success", "prompt_len": n_prompt, "response_len": n_resp,
                            "seq_len": n_prompt + n_resp, "global_steps": 1, "min_global_steps": 1,
                            "max_global_steps": 1}
    for i in range(2):  # padding: a copy of the first row, its own uid, zero reward, tag is_padding
        key = f"padfeed_{i}_0"
        keys.append(key)
        tq.rows[key] = {**tq.rows[keys[0]], "uid": "padfeed", "session_id": i,
                        "rm_scores": torch.zeros(3), "num_turns": 0}
        tq.tags[key] = {**tq.tags[keys[0]], "is_padding": True}
    return KVBatchMeta(keys=keys, tags=[tq.tags[k] for k in keys], partition_id="train")


@pytest.fixture
def fake_tq(monkeypatch):
    import transfer_queue

    tq = FakeTQ()
    monkeypatch.setattr(transfer_queue, "kv_batch_get", tq.kv_batch_get)
    monkeypatch.setattr(transfer_queue, "kv_batch_put", tq.kv_batch_put)
    return tq


@pytest.fixture
def registry(monkeypatch):
    """verl's v1 trainer registry and its advantage functions (wrapped by tagrpo's installers),
    restored after the test."""
    from verl.trainer.ppo import ray_trainer
    from verl.trainer.ppo.v1 import trainer_base

    monkeypatch.setattr(trainer_base, "TRAINER_REGISTRY", dict(trainer_base.TRAINER_REGISTRY))
    monkeypatch.setattr(ray_trainer, "compute_advantage", ray_trainer.compute_advantage)
    monkeypatch.setattr(trainer_base, "compute_advantage_for_multi_trajectories",
                        trainer_base.compute_advantage_for_multi_trajectories)
    return trainer_base


def test_v1_step_metrics_hold_uniform_fractions_beside_verls_own(fake_tq, registry):
    from verl.trainer.ppo.v1 import PPOTrainerSync

    from tagrpo.integrations.verl.trainer import UniformMetricsV1Mixin, install_v1_trainer

    cls = install_v1_trainer("sync")
    assert registry.get_trainer_cls("sync") is cls
    assert issubclass(cls, PPOTrainerSync) and issubclass(cls, UniformMetricsV1Mixin)

    trainer = cls.__new__(cls)  # the attributes _compute_advantage / _compute_metrics read
    trainer.config = compose()
    trainer.use_critic = False
    trainer._rollout_moe_lb_metrics_accumulator = None
    trainer._get_n_gpus_for_throughput = lambda: 1

    batch = v1_step_batch(fake_tq)
    metrics: dict = {}
    batch = trainer._compute_advantage(batch, metrics)  # verl's GRPO over each family's uid
    trainer._compute_metrics(batch, metrics, {"step": 2.0, "gen": 1.0}, global_steps=1, epoch=0)

    assert_uniform(metrics)
    # verl's own metrics of the same step are there, on the 12 real rows only
    assert metrics["training/global_step"] == 1
    assert metrics["critic/score/mean"] == pytest.approx(4 / 12)
    assert metrics["critic/advantages/max"] > 0
    assert ["uid", "rm_scores", "extra_fields"] in fake_tq.gets

    # padding rows counted, the result would differ (one more, all-wrong, family)
    batch.tags = [{k: v for k, v in t.items() if k != "is_padding"} for t in batch.tags]
    from tagrpo.integrations.verl.trainer import uniform_metrics_from_kv

    with_padding = uniform_metrics_from_kv(batch)
    assert with_padding["uniform/family_all_wrong"] == pytest.approx(1 / 3)


def test_v1_hook_wraps_every_trainer_mode_and_warns_without_ta_variant(fake_tq, registry, caplog):
    from tagrpo.integrations.verl.trainer import (
        SeparateAdvantageV1Mixin,
        UniformMetricsV1Mixin,
        install_v1_trainer,
        uniform_metrics_from_kv,
    )

    for mode in ("sync", "colocate_async", "separate_async"):
        base = registry.get_trainer_cls(mode)
        cls = install_v1_trainer(mode)
        assert cls.__mro__[1:4] == (UniformMetricsV1Mixin, SeparateAdvantageV1Mixin, base)
        assert "_compute_advantage" not in base.__dict__  # the mixin wraps verl's base method
        assert install_v1_trainer(mode) is cls  # idempotent
        assert "_compute_metrics" not in base.__dict__  # verl's mode classes keep the base method

    batch = v1_step_batch(fake_tq)
    for key in batch.keys:
        fake_tq.rows[key]["extra_fields"] = {}
    assert uniform_metrics_from_kv(batch) == {}
    assert "ta_variant" in caplog.text


# ------------------------------------------------------------------------------------------
# v0: RayPPOTrainer._update_actor of one step on a synthetic DataProto batch
# ------------------------------------------------------------------------------------------


def v0_batch():
    """What `RayPPOTrainer.fit` hands `_update_actor` (left-padded prompts, right-padded
    responses, `token_level_scores` with the reward on the last response token, uid, and the
    agent loop's `ta_variant`), rows shuffled as `_balance_batch` would."""
    from verl import DataProto

    rows = [(uid, v, s) for uid, scores in SCORES.items() for v, s in zip(VARIANTS, scores)]
    rows = [rows[i] for i in np.random.default_rng(0).permutation(len(rows))]
    B, P, R = len(rows), 4, 5
    resp_len = torch.tensor([3, 5, 4, 2, 5, 3, 4, 4, 5, 2, 3, 5])
    response_mask = (torch.arange(R)[None] < resp_len[:, None]).long()
    prompt_mask = torch.ones(B, P, dtype=torch.long)
    prompt_mask[::2, 0] = 0  # some prompts shorter (left padding)
    attention_mask = torch.cat([prompt_mask, response_mask], dim=1)
    scores = torch.zeros(B, R)
    scores[torch.arange(B), resp_len - 1] = torch.tensor([float(s) for _, _, s in rows])
    batch = DataProto.from_single_dict({
        "prompts": torch.randint(3, 50, (B, P)),
        "responses": torch.randint(3, 50, (B, R)),
        "input_ids": torch.randint(3, 50, (B, P + R)),
        "attention_mask": attention_mask,
        "position_ids": (attention_mask.cumsum(-1) - 1).clamp(min=0),
        "response_mask": response_mask,
        "token_level_scores": scores,
        "token_level_rewards": scores,
        "advantages": torch.zeros(B, R),
        "old_log_probs": torch.zeros(B, R),
    })
    uid = np.empty(B, dtype=object)
    uid[:] = [u for u, _, _ in rows]
    batch.non_tensor_batch["uid"] = uid
    batch.non_tensor_batch["ta_variant"] = np.array([v for _, v, _ in rows])
    return batch


class FakeActorGroup:
    """Stands in for verl's actor worker group: records the update, returns worker metrics."""

    def __init__(self):
        self.updates = []

    def update_actor(self, batch_td):
        from tensordict import TensorDict
        from verl.utils import tensordict_utils as tu

        self.updates.append(batch_td)
        out = TensorDict({}, batch_size=[])
        tu.assign_non_tensor_data(out, "metrics", {"pg_loss": [0.25, 0.75], "mfu": [0.1], "grad_norm": [1.0]})
        return out


def test_v0_update_actor_metrics_hold_uniform_fractions():
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    from verl.utils.metric import reduce_metrics

    from tagrpo.integrations.verl.trainer import TAGRPORayPPOTrainer

    assert issubclass(TAGRPORayPPOTrainer, RayPPOTrainer)
    trainer = TAGRPORayPPOTrainer.__new__(TAGRPORayPPOTrainer)
    trainer.config = compose("trainer.use_v1=false", f"actor_rollout_ref.rollout.agent.agent_loop_manager_class={V0_MANAGER}")
    trainer.actor_rollout_wg = FakeActorGroup()

    batch = v0_batch()
    actor_output = trainer._update_actor(batch)
    metrics = reduce_metrics(actor_output.meta_info["metrics"])  # what fit merges into the step

    assert len(trainer.actor_rollout_wg.updates) == 1  # verl's update ran, unchanged
    assert metrics["actor/pg_loss"] == pytest.approx(0.5) and "perf/mfu/actor" in metrics
    assert_uniform(metrics)

    batch.non_tensor_batch.pop("ta_variant")
    assert not any(k.startswith("uniform/") for k in trainer._update_actor(batch).meta_info["metrics"])


# ------------------------------------------------------------------------------------------
# the entry point hands verl tagrpo's task runners, which install the hooked trainers
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("use_v1", [True, False])
@pytest.mark.parametrize("algorithm", ["ta-grpo", "ta-grpo-separate"])
def test_entry_point_runs_verl_with_tagrpo_task_runner(monkeypatch, use_v1, algorithm):
    from verl.trainer import main_ppo

    from tagrpo.integrations.verl import __main__ as entry
    from tagrpo.integrations.verl.trainer import TAGRPOTaskRunner, TAGRPOTaskRunnerV1

    handed = []
    monkeypatch.setattr(main_ppo, "run_ppo", lambda config, task_runner_class: handed.append(task_runner_class))
    overrides = [  # what verl's validate_config demands of any launch (cf. examples/verl/smoke.sh)
        "data.train_files=missing.parquet", "data.train_batch_size=8", "trainer.n_gpus_per_node=1",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4", f"tagrpo.algorithm={algorithm}",
    ]
    if not use_v1:
        overrides += ["trainer.use_v1=false", f"actor_rollout_ref.rollout.agent.agent_loop_manager_class={V0_MANAGER}"]
    entry.run(compose(*overrides))  # checks, verl's validate_config, then run_ppo
    assert handed == [TAGRPOTaskRunnerV1 if use_v1 else TAGRPOTaskRunner]


def test_task_runners_install_the_hooked_trainer_before_verl_builds_it(monkeypatch, registry):
    """`TaskRunner.run` in the runner's Ray process: the trainer verl then instantiates is
    tagrpo's (verl's run itself, which starts TransferQueue / workers, is replaced by a probe)."""
    from verl.trainer import main_ppo_v0
    from verl.trainer.main_ppo import TaskRunnerV1
    from verl.trainer.ppo import ray_trainer
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    from verl.trainer.ppo.v1 import PPOTrainerColocateAsync

    from tagrpo.integrations.verl.trainer import (
        TAGRPORayPPOTrainer,
        TAGRPOTaskRunner,
        TAGRPOTaskRunnerV1,
        UniformMetricsV1Mixin,
    )

    seen = {}

    def probe(name, cls):  # the trainer verl's run would build, and the advantage functions it calls
        seen[name] = cls
        seen[name + "_adv"] = (ray_trainer.compute_advantage, registry.compute_advantage_for_multi_trajectories)

    monkeypatch.setattr(TaskRunnerV1.__ray_actor_class__, "run",
                        lambda self, config: probe("v1", registry.get_trainer_cls(config.trainer.v1.trainer_mode)))
    monkeypatch.setattr(main_ppo_v0.TaskRunner.__ray_actor_class__, "run",
                        lambda self, config: probe("v0", main_ppo_v0.RayPPOTrainer))
    monkeypatch.setattr(main_ppo_v0, "RayPPOTrainer", RayPPOTrainer)  # restored after the test

    configs = [compose("trainer.v1.trainer_mode=colocate_async"), compose("trainer.use_v1=false")]
    assert all("hooked_trainer" not in c.tagrpo for c in configs)
    TAGRPOTaskRunnerV1.__ray_actor_class__().run(configs[0])
    assert issubclass(seen["v1"], UniformMetricsV1Mixin) and issubclass(seen["v1"], PPOTrainerColocateAsync)
    TAGRPOTaskRunner.__ray_actor_class__().run(configs[1])
    assert seen["v0"] is TAGRPORayPPOTrainer
    # both runners mark the config (ta-grpo-separate's agent loop demands it) and wrap verl's
    # advantage functions (no-ops unless ta-grpo-separate's grouping is active)
    assert all(c.tagrpo.hooked_trainer is True for c in configs)
    for name in ("v1_adv", "v0_adv"):
        assert all(hasattr(f, "__tagrpo_original__") for f in seen[name])


def test_task_runner_actor_classes_reach_a_fresh_process_as_tagrpo_code(tmp_path):
    """What Ray ships to the task runner's process (`export_actor_class` pickles the actor's
    modified class with cloudpickle) unpickles in a fresh interpreter into a class whose `run` is
    tagrpo's, imported from the installed package (not a copy by value)."""
    from ray import cloudpickle

    from tagrpo.integrations.verl.trainer import TAGRPOTaskRunner, TAGRPOTaskRunnerV1

    for name, actor in (("v1", TAGRPOTaskRunnerV1), ("v0", TAGRPOTaskRunner)):
        (tmp_path / f"{name}.pkl").write_bytes(cloudpickle.dumps(actor.__ray_metadata__.modified_class))
    probe = (
        "import pickle, sys\n"
        "for name in ('v1', 'v0'):\n"
        "    cls = pickle.loads(open(sys.argv[1] + '/' + name + '.pkl', 'rb').read())\n"
        "    print(name, cls.run.__module__, cls.run.__qualname__, 'tagrpo.integrations.verl.trainer' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == [
        "v1 tagrpo.integrations.verl.trainer _TaskRunnerV1Body.run True",
        "v0 tagrpo.integrations.verl.trainer _TaskRunnerV0Body.run True",
    ]


def test_verl_main_body_is_what_the_entry_point_replays():
    """The entry point replays verl 0.9.1's `main_ppo.main` (auto_set_device, validate_config,
    run_ppo with a task runner); a verl whose main does more fails here, not silently."""
    from verl.trainer import main_ppo

    tree = ast.parse(inspect.getsource(main_ppo))
    main = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main")
    called = set()
    for node in (n for stmt in main.body for n in ast.walk(stmt)):  # the body, not the decorator
        if isinstance(node, ast.Call):
            f = node.func
            called.add(f.id if isinstance(f, ast.Name) else f.attr)
    assert called == {"auto_set_device", "validate_config", "need_reference_policy", "need_critic", "run_ppo", "warning"}
