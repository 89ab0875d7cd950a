"""Integrations of TA-GRPO with other training frameworks.

- `tagrpo.integrations.trl`: `TAGRPOConfig` / `TAGRPOTrainer`, drop-in subclasses of Hugging Face
  TRL's `GRPOConfig` / `GRPOTrainer` (install with `pip install 'tagrpo[trl]'`).
- `tagrpo.integrations.verl`: an agent loop, a Hydra config on top of verl's `ppo_trainer` and an
  entry point (`python -m tagrpo.integrations.verl`) that run TA-GRPO on stock verl 0.9.1
  (install with `pip install 'tagrpo[verl]'`, in its own environment: verl pins an older
  transformers).

Nothing is imported here: `import tagrpo` and `import tagrpo.integrations` never need TRL or verl.
"""
