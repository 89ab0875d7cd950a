"""The TRL versions `tagrpo.integrations.trl` supports, in a module of its own (no imports) so that
both the lazy front `trl.py` and the trainer `_trl_trainer.py` can read it without importing each
other."""

#: TRL versions this integration is tested with (the `trl` extra in pyproject.toml pins the same).
SUPPORTED_TRL = ">=1.16,<1.17"
