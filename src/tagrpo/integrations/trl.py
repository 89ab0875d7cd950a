"""TA-GRPO for Hugging Face TRL users: `TAGRPOConfig` and `TAGRPOTrainer`.

    from tagrpo.integrations.trl import TAGRPOConfig, TAGRPOTrainer

They subclass TRL's `GRPOConfig` / `GRPOTrainer`. Plain GRPO samples G completions of each prompt
and normalizes rewards per prompt; TA-GRPO also samples G completions of each of N rewordings
(the dataset's `neighbors` column), normalizes advantages over the whole family of (N+1)*G
completions, and computes every log-probability on the original prompt. See `_trl_trainer` for
how, and for the TRL methods it overrides.

This module is a lazy front: TRL is imported only when one of the names below is first used, so
`import tagrpo.integrations.trl` works (and `import tagrpo` never needs TRL) without TRL
installed; using a name then raises an ImportError that says how to install it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

# TRL versions this integration is tested with. Defined in `_trl_version` (no imports), which
# `_trl_trainer` reads too, so that this module and the trainer do not import each other.
from tagrpo.integrations._trl_version import SUPPORTED_TRL

if TYPE_CHECKING:  # for type checkers and linters only; at run time see __getattr__
    from tagrpo.integrations._trl_trainer import TAGRPOConfig, TAGRPOTrainer, check_trl_version

__all__ = ["SUPPORTED_TRL", "TAGRPOConfig", "TAGRPOTrainer", "check_trl_version"]

_LAZY = ("TAGRPOConfig", "TAGRPOTrainer", "check_trl_version")


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        import trl  # noqa: F401
    except ImportError as err:
        raise ImportError(
            f"tagrpo.integrations.trl.{name} needs TRL ({SUPPORTED_TRL}), which is not installed. "
            f"Install it with: pip install 'tagrpo[trl]'  (or pip install 'trl{SUPPORTED_TRL}')"
        ) from err
    from tagrpo.integrations import _trl_trainer

    return getattr(_trl_trainer, name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
