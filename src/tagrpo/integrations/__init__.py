"""Integrations of TA-GRPO with other training frameworks.

- `tagrpo.integrations.trl`: `TAGRPOConfig` / `TAGRPOTrainer`, drop-in subclasses of Hugging Face
  TRL's `GRPOConfig` / `GRPOTrainer` (install with `pip install 'tagrpo[trl]'`).

Nothing is imported here: `import tagrpo` and `import tagrpo.integrations` never need TRL.
"""
