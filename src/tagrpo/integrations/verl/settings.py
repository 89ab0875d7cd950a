"""The `tagrpo` block of a verl config, and the checks a TA-GRPO launch must pass (no verl import).

`check_config(config)` is run by `python -m tagrpo.integrations.verl` on the composed Hydra config
before verl starts (Ray, GPUs). Every refusal names the key to set and the valid choices. Keys
and defaults checked against verl 0.9.1's `verl/trainer/config/_generated_ppo_trainer.yaml`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from tagrpo.integrations.verl._deps import TAGRPOVerlError

#: `tagrpo.algorithm` choices, as in `tagrpo train`.
ALGORITHMS = ("grpo", "grpo-matched", "ta-grpo", "ta-grpo-unanchored", "ta-grpo-separate")
#: Name under which `TAGRPOAgentLoop` is registered (the config's `rollout.agent.default_agent_loop`).
AGENT_NAME = "tagrpo_agent"
#: Non-tensor field the v0 manager adds: the copy number of a row inside its uid (its session).
SESSION_KEY = "tagrpo_session"
V0_MANAGER = "tagrpo.integrations.verl.agent_loop.TAGRPOAgentLoopManager"
#: Config key tagrpo's task runners set (`trainer.mark_hooked`) before verl builds its trainer and
#: workers: the trainer is tagrpo's subclass, whose advantage hook `ta-grpo-separate` needs.
HOOKED_KEY = "tagrpo.hooked_trainer"


def _get(config: Any, dotted: str, default: Any = None) -> Any:
    """`config.a.b.c` for a DictConfig or nested dicts, `default` when a key is missing."""
    node = config
    for part in dotted.split("."):
        if node is None:
            return default
        try:
            node = node.get(part)
        except AttributeError:
            return default
        if node is None:
            return default
    return node


@dataclass(frozen=True)
class TASettings:
    """What the agent loop needs to know: `tagrpo.{algorithm,num_neighbors,samples_per_variant}`."""

    #: grpo | grpo-matched | ta-grpo | ta-grpo-unanchored | ta-grpo-separate
    algorithm: str = "ta-grpo"
    #: N: neighbors (rewordings) per question; 0 only with grpo
    num_neighbors: int = 3
    #: G: responses sampled per variant (q0 and each neighbor)
    samples_per_variant: int = 8

    def __post_init__(self) -> None:
        if self.algorithm not in ALGORITHMS:
            raise TAGRPOVerlError(
                f"tagrpo.algorithm={self.algorithm!r} is not one of {', '.join(ALGORITHMS)}"
            )
        if self.samples_per_variant < 1:
            raise TAGRPOVerlError(f"tagrpo.samples_per_variant must be >= 1, got {self.samples_per_variant}")
        if self.num_neighbors < 0:
            raise TAGRPOVerlError(f"tagrpo.num_neighbors must be >= 0, got {self.num_neighbors}")
        if self.algorithm != "grpo" and self.num_neighbors < 1:
            raise TAGRPOVerlError(
                f"tagrpo.algorithm={self.algorithm} needs tagrpo.num_neighbors >= 1 (got "
                f"{self.num_neighbors}); use tagrpo.algorithm=grpo for plain GRPO"
            )

    @classmethod
    def from_config(cls, config: Any) -> TASettings:
        block = _get(config, "tagrpo")
        if block is None:
            raise TAGRPOVerlError(
                "the config has no `tagrpo` block (algorithm, num_neighbors, samples_per_variant); "
                "launch with `python -m tagrpo.integrations.verl`, whose config adds it"
            )
        return cls(
            algorithm=str(_get(block, "algorithm", "ta-grpo")),
            num_neighbors=int(_get(block, "num_neighbors", 3)),
            samples_per_variant=int(_get(block, "samples_per_variant", 8)),
        )

    @property
    def family_size(self) -> int:
        """rollout.n: G for grpo, (N+1)*G otherwise."""
        if self.algorithm == "grpo":
            return self.samples_per_variant
        return (self.num_neighbors + 1) * self.samples_per_variant

    @property
    def uses_neighbors(self) -> bool:
        return self.algorithm in ("ta-grpo", "ta-grpo-unanchored", "ta-grpo-separate")

    @property
    def anchored(self) -> bool:
        """Report q0's prompt ids for neighbor sessions (every log-prob on q0)."""
        return self.algorithm in ("ta-grpo", "ta-grpo-separate")

    @property
    def per_variant_advantage(self) -> bool:
        """Normalize each variant's G rewards alone (the separate ablation), not the family's."""
        return self.algorithm == "ta-grpo-separate"

    def variant_of(self, session: int) -> int:
        """Variant generating session `session` (0 = q0): session // G with neighbors, else 0."""
        if not self.uses_neighbors:
            return 0
        return int(session) // self.samples_per_variant


def check_hooked(config: Any, ta: TASettings) -> None:
    """Raise for ta-grpo-separate unless tagrpo's task runner built the trainer (`HOOKED_KEY`):
    the per-variant grouping is its advantage hook, and verl's own trainer would silently
    normalize over the family instead. Called by the agent loop, in verl's workers."""
    if ta.per_variant_advantage and not _get(config, HOOKED_KEY, False):
        raise TAGRPOVerlError(
            "tagrpo.algorithm=ta-grpo-separate needs tagrpo's trainer hook (the advantage grouped by uid "
            "and variant), which only `python -m tagrpo.integrations.verl` installs (through its task "
            "runner); this run's trainer was built another way (verl's main_ppo, another recipe), whose "
            "grpo estimator would normalize over the whole family. Launch with `python -m "
            "tagrpo.integrations.verl`"
        )


def family_size(num_neighbors: Any, samples_per_variant: Any, algorithm: Any = "ta-grpo") -> int:
    """The OmegaConf resolver behind `rollout.n: ${tagrpo_family_size:...}`: G for grpo, else
    (N+1)*G. It does not validate (`check_config` does, with messages that say what to set)."""
    if str(algorithm) == "grpo":
        return int(samples_per_variant)
    return (int(num_neighbors) + 1) * int(samples_per_variant)


def config_file(name: str) -> str:
    """Absolute path of a file in this package's `config/` folder (resolver `tagrpo_file`)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "config", str(name))
    if not os.path.isfile(path):
        raise TAGRPOVerlError(f"tagrpo's verl config file {path} is missing (a broken install?)")
    return path


def register_resolvers() -> None:
    """Register `tagrpo_family_size` and `tagrpo_file` with OmegaConf (idempotent)."""
    from omegaconf import OmegaConf

    OmegaConf.register_new_resolver("tagrpo_family_size", family_size, replace=True)
    OmegaConf.register_new_resolver("tagrpo_file", config_file, replace=True)


def _refuse(key: str, value: Any, want: str, why: str) -> None:
    raise TAGRPOVerlError(f"{key}={value!r} cannot be used with TA-GRPO: {why}. Set {want}.")


def check_config(config: Any, *, check_data: bool = True) -> TASettings:
    """Raise TAGRPOVerlError unless `config` (a composed verl ppo_trainer config with a `tagrpo`
    block) runs the chosen algorithm correctly; return the settings.

    Refused: rollout.n != (N+1)*G; an estimator other than `grpo`; another agent loop; multi-turn
    tool loops; val_kwargs.n > G; and, for the anchored algorithms (ta-grpo, ta-grpo-separate),
    rollout log-probs, MoE routing replay and every rollout correction (bypass mode, importance sampling,
    rejection sampling), which would weight neighbor rows by pi(o|q0)/pi(o|q_n). With
    `check_data`, the first rows of each local training parquet must carry N neighbors.
    """
    ta = TASettings.from_config(config)
    n = _get(config, "actor_rollout_ref.rollout.n")
    if n != ta.family_size:
        what = "G" if ta.algorithm == "grpo" else f"(N+1)*G = ({ta.num_neighbors}+1)*{ta.samples_per_variant}"
        raise TAGRPOVerlError(
            f"actor_rollout_ref.rollout.n={n} but tagrpo.algorithm={ta.algorithm} samples {what} = "
            f"{ta.family_size} responses per dataset row (one family under one uid). Set "
            f"actor_rollout_ref.rollout.n={ta.family_size} (or leave it at its default, which is computed), "
            "or change tagrpo.num_neighbors / tagrpo.samples_per_variant"
        )
    est = _get(config, "algorithm.adv_estimator")
    if est != "grpo":
        _refuse("algorithm.adv_estimator", est, "algorithm.adv_estimator=grpo",
                "the joint advantage is verl's own grpo estimator applied to the family's uid "
                "(for ta-grpo-separate, tagrpo's trainer hook groups that estimator by uid and variant)")
    loop = _get(config, "actor_rollout_ref.rollout.agent.default_agent_loop")
    if loop != AGENT_NAME:
        _refuse("actor_rollout_ref.rollout.agent.default_agent_loop", loop,
                f"actor_rollout_ref.rollout.agent.default_agent_loop={AGENT_NAME}",
                "only tagrpo's agent loop generates from the neighbors (and anchors); another loop "
                "would sample every session from q0")
    if not _get(config, "actor_rollout_ref.rollout.agent.agent_loop_config_path"):
        _refuse("actor_rollout_ref.rollout.agent.agent_loop_config_path", None,
                "actor_rollout_ref.rollout.agent.agent_loop_config_path='${tagrpo_file:agent_loops.yaml}'",
                f"verl's agent-loop workers learn the `{AGENT_NAME}` loop from that file")
    if _get(config, "actor_rollout_ref.rollout.multi_turn.enable", False):
        _refuse("actor_rollout_ref.rollout.multi_turn.enable", True,
                "actor_rollout_ref.rollout.multi_turn.enable=false",
                "multi-turn tool loops rewrite the prompt between turns, so 'the same answer to a "
                "reworded question' is not defined there")
    use_v1 = bool(_get(config, "trainer.use_v1", True))
    manager = _get(config, "actor_rollout_ref.rollout.agent.agent_loop_manager_class")
    if not use_v1 and manager != V0_MANAGER:
        _refuse("actor_rollout_ref.rollout.agent.agent_loop_manager_class", manager,
                f"actor_rollout_ref.rollout.agent.agent_loop_manager_class={V0_MANAGER}",
                "verl's legacy trainer (trainer.use_v1=false) gives agent loops no session id; "
                "tagrpo's manager numbers the copies of each uid")
    if ta.uses_neighbors:
        val_n = _get(config, "actor_rollout_ref.rollout.val_kwargs.n", 1)
        if val_n is not None and int(val_n) > ta.samples_per_variant:
            _refuse("actor_rollout_ref.rollout.val_kwargs.n", val_n,
                    f"actor_rollout_ref.rollout.val_kwargs.n <= tagrpo.samples_per_variant={ta.samples_per_variant}",
                    "validation sessions 0..n-1 are generated like training sessions, so sessions "
                    ">= G would be sampled from neighbors instead of the question itself")
    if ta.anchored:
        if _get(config, "actor_rollout_ref.rollout.calculate_log_probs", True):
            _refuse("actor_rollout_ref.rollout.calculate_log_probs", True,
                    "actor_rollout_ref.rollout.calculate_log_probs=false",
                    "the sampler's log-probs of a neighbor response are conditioned on the neighbor "
                    "q_n, while every log-prob of the update is taken on q0 (anchoring)")
        if _get(config, "actor_rollout_ref.rollout.enable_rollout_routing_replay", False):
            _refuse("actor_rollout_ref.rollout.enable_rollout_routing_replay", True,
                    "actor_rollout_ref.rollout.enable_rollout_routing_replay=false",
                    "the MoE experts a neighbor response was routed through were chosen on q_n, "
                    "and replaying them on q0 + response mixes the two prompts")
        rc = "algorithm.rollout_correction"
        if _get(config, f"{rc}.bypass_mode", False):
            _refuse(f"{rc}.bypass_mode", True, f"{rc}.bypass_mode=false",
                    "bypass mode uses the sampler's log-probs (on q_n) as the old policy")
        for key in ("rollout_is", "rollout_rs"):
            value = _get(config, f"{rc}.{key}")
            if value is not None:
                _refuse(f"{rc}.{key}", value, f"{rc}.{key}=null",
                        "it would weight or reject neighbor rows by pi(o|q0)/pi(o|q_n), undoing the anchoring")
    if check_data and ta.uses_neighbors:
        files = _get(config, "data.train_files")
        files = [files] if isinstance(files, str) else list(files or [])
        for path in files:
            if isinstance(path, str) and path.endswith(".parquet") and os.path.isfile(path):
                check_parquet_neighbors(path, ta.num_neighbors)
    return ta


def check_parquet_neighbors(path: str, num_neighbors: int, rows: int = 64) -> None:
    """Raise TAGRPOVerlError unless the first `rows` rows of a verl parquet carry at least
    `num_neighbors` neighbors in `extra_info.neighbors` (what `tagrpo export verl` writes)."""
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(path)
    if "extra_info" not in pf.schema_arrow.names:
        raise TAGRPOVerlError(
            f"{path}: no `extra_info` column; TA-GRPO rows carry extra_info.neighbors. Make the file "
            "with `tagrpo export verl --input NEIGHBORS.jsonl --output FILE.parquet --n N`"
        )
    batch = next(pf.iter_batches(batch_size=rows, columns=["extra_info"]), None)
    for i, info in enumerate(batch.column(0).to_pylist() if batch is not None else []):
        neighbors = (info or {}).get("neighbors")
        if not isinstance(neighbors, list) or len(neighbors) < num_neighbors:
            have = len(neighbors) if isinstance(neighbors, list) else "no"
            raise TAGRPOVerlError(
                f"{path}: row {i} has {have} neighbors in extra_info.neighbors, fewer than "
                f"tagrpo.num_neighbors={num_neighbors}. Re-export with `tagrpo export verl --n "
                f"{num_neighbors}` or lower tagrpo.num_neighbors"
            )
