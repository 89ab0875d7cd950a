"""`python -m tagrpo.integrations.verl [hydra overrides]`: check a TA-GRPO config, then run verl.

The config is verl 0.9.1's `ppo_trainer` with `config/tagrpo_trainer.yaml` on top (the `tagrpo`
block, rollout.n = (N+1)*G, rollout log-probs off, tagrpo's agent loop and reward function).
Hydra's own flags work: `--help` and `--cfg job` print the composed config (`--resolve` to see
numbers instead of `${...}`), without importing Ray or starting anything. Otherwise the config is
resolved, checked (`settings.check_config`: every refusal says what to set), and handed to verl:
the steps of `verl.trainer.main_ppo.main` (`auto_set_device`, `validate_config`, `run_ppo`), with
the task runner of `tagrpo.integrations.verl.trainer` instead of verl's (its trainer adds the
uniform-group diagnostics `uniform/*` to every step's metrics and, for `ta-grpo-separate`, groups
verl's advantage by uid and variant; v1 and legacy v0 trainer alike).
Ray starts and training runs as in any verl run (GPUs required).
"""

from __future__ import annotations

import sys


def run(config) -> None:
    """Resolve and check `config`, then run verl's PPO trainer on it."""
    from omegaconf import OmegaConf

    from tagrpo.integrations.verl._deps import TAGRPOVerlError, require_verl
    from tagrpo.integrations.verl.settings import check_config

    require_verl("python -m tagrpo.integrations.verl")
    OmegaConf.resolve(config)  # Ray workers do not know the tagrpo resolvers
    try:
        ta = check_config(config)
    except TAGRPOVerlError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    print(
        f"tagrpo: {ta.algorithm} with N={ta.num_neighbors}, G={ta.samples_per_variant}: "
        f"rollout.n={ta.family_size} per row, anchored={ta.anchored}",
        flush=True,
    )
    run_verl(config)


def run_verl(config) -> None:
    """verl 0.9.1's `main_ppo.main` body with tagrpo's task runner (`trainer.task_runner_class(config)`):
    verl's documented way for a recipe to change the TaskRunner (`run_ppo(config, task_runner_class)`)."""
    from verl.trainer.main_ppo import run_ppo
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config
    from verl.utils.device import auto_set_device

    from tagrpo.integrations.verl.trainer import task_runner_class

    auto_set_device(config)
    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    if not config.trainer.use_v1:
        print("tagrpo: verl's legacy trainer (trainer.use_v1=false) is deprecated in verl 0.9.1", flush=True)
    run_ppo(config, task_runner_class=task_runner_class(config))


def main() -> None:
    import hydra

    from tagrpo.integrations.verl.settings import register_resolvers

    register_resolvers()
    hydra.main(config_path="config", config_name="tagrpo_trainer", version_base=None)(run)()


if __name__ == "__main__":
    main()
