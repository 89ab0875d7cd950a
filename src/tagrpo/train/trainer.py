"""Where `Trainer` used to live; it is `tagrpo.train.loop.Trainer` (the same class)."""

from tagrpo.train.loop import Trainer, make_accelerator
from tagrpo.train.model import lr_lambda

__all__ = ["Trainer", "lr_lambda", "make_accelerator"]
