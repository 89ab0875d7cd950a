"""`python -m tagrpo.integrations.verl [hydra overrides]`: check a TA-GRPO config, then run verl.

The config is verl 0.9.1's `ppo_trainer` with `config/tagrpo_trainer.yaml` on top (the `tagrpo`
block, rollout.n = (N+1)*G, rollout log-probs off, tagrpo's agent loop and reward function).
Hydra's own flags work: `--help` and `--cfg job` print the composed config (`--resolve` to see
numbers instead of `${...}`), without importing Ray or starting anything. Otherwise the config is
resolved, checked (`settings.check_config`: every refusal says what to set), and handed to verl's
`verl.trainer.main_ppo.main`, which starts Ray and trains as any verl run (GPUs required).
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
    from verl.trainer.main_ppo import main as verl_main

    verl_main(config)  # Hydra's decorated main runs its body on a given config


def main() -> None:
    import hydra

    from tagrpo.integrations.verl.settings import register_resolvers

    register_resolvers()
    hydra.main(config_path="config", config_name="tagrpo_trainer", version_base=None)(run)()


if __name__ == "__main__":
    main()
