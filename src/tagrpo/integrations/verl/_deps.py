"""Import verl with an error that says how to install it (used by the submodules that need it)."""

from __future__ import annotations

from tagrpo.errors import TagrpoError
from tagrpo.integrations.verl import SUPPORTED_VERL


class TAGRPOVerlError(TagrpoError, ValueError):
    """A TA-GRPO-on-verl configuration or dataset problem the user can fix (also a ValueError)."""


def require_verl(what: str) -> None:
    """Raise ImportError naming `what` and the install command if verl is not importable, and
    TAGRPOVerlError if the installed verl is not a supported version."""
    try:
        import verl
    except ImportError as err:
        raise ImportError(
            f"{what} needs verl ({SUPPORTED_VERL}), which is not installed. Install it with: "
            f"pip install 'tagrpo[verl]'  (or pip install 'verl{SUPPORTED_VERL}' TransferQueue cachetools); "
            "`make test` builds such an environment in .venv-verl"
        ) from err
    check_verl_version(getattr(verl, "__version__", "0"))


def check_verl_version(version: str) -> None:
    """Raise TAGRPOVerlError if `version` is outside `SUPPORTED_VERL`: the agent loop uses verl's
    agent-loop internals (`ct_build_initial_tokens`, the v0/v1 managers), which change between
    releases, so other versions are refused rather than silently mis-trained."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    if not SpecifierSet(SUPPORTED_VERL).contains(Version(version), prereleases=True):
        raise TAGRPOVerlError(
            f"tagrpo's verl integration supports verl{SUPPORTED_VERL}, but verl {version} is installed. "
            f"Install a supported version: pip install 'verl{SUPPORTED_VERL}'  (or pip install 'tagrpo[verl]')."
        )
