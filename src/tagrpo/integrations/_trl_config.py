"""`TAGRPOConfig`: TRL's `GRPOConfig` with TA-GRPO's N (num_neighbors) and G (samples_per_variant),
validated, and `num_generations` derived as the family size (N+1)*G (see `_trl_trainer.py`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from trl import GRPOConfig

from tagrpo.integrations._trl_family import TAGRPOConfigError, check_trl_version


@dataclass
class TAGRPOConfig(GRPOConfig):
    r"""`GRPOConfig` for TA-GRPO. Everything of `GRPOConfig` applies; in addition:

    Parameters:
        num_neighbors (`int`, defaults to `2`):
            N, the number of problem-equivalent rewordings used per question. Each dataset row's
            `neighbors` column must hold at least N strings; the first N are used.
        samples_per_variant (`int`, defaults to `4`):
            G, completions sampled per variant (the original and each neighbor).
        num_generations (`int`, *optional*):
            Set to (N+1)*G automatically (the family size, which is also TRL's advantage group).
            Leave it unset; any other value is an error.

    `generation_batch_size` (by default `per_device_train_batch_size * processes *
    steps_per_generation`) must be a multiple of (N+1)*G, so that whole families are generated
    and normalized together. `remove_unused_columns` must stay False (the `neighbors` column is
    needed at generation time).
    """

    num_generations: int | None = field(
        default=None,
        metadata={
            "help": "Set automatically to (num_neighbors + 1) * samples_per_variant; leave unset "
            "(any other value is an error)."
        },
    )
    num_neighbors: int = field(
        default=2,
        metadata={
            "help": "N: problem-equivalent rewordings per question (first N of the `neighbors` column)."
        },
    )
    samples_per_variant: int = field(
        default=4,
        metadata={
            "help": "G: completions sampled for the original question and for each neighbor."
        },
    )

    def __post_init__(self):
        check_trl_version()
        for name in ("num_neighbors", "samples_per_variant"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TAGRPOConfigError(f"TAGRPOConfig.{name} must be an int, got {value!r}")
        if self.num_neighbors < 0:
            raise TAGRPOConfigError(
                f"TAGRPOConfig.num_neighbors must be >= 0 (0 = plain GRPO), got {self.num_neighbors}"
            )
        if self.samples_per_variant < 1:
            raise TAGRPOConfigError(
                f"TAGRPOConfig.samples_per_variant must be >= 1, got {self.samples_per_variant}"
            )
        family = (self.num_neighbors + 1) * self.samples_per_variant
        if family < 2:
            raise TAGRPOConfigError(
                "TAGRPOConfig: (num_neighbors + 1) * samples_per_variant must be >= 2 (an advantage needs at "
                f"least two completions per family); got ({self.num_neighbors} + 1) * {self.samples_per_variant} = {family}."
            )
        if self.num_generations is not None and self.num_generations != family:
            raise TAGRPOConfigError(
                f"TAGRPOConfig.num_generations={self.num_generations} conflicts with (num_neighbors + 1) * "
                f"samples_per_variant = ({self.num_neighbors} + 1) * {self.samples_per_variant} = {family}. "
                "Leave num_generations unset; it is derived from the other two."
            )
        if self.remove_unused_columns:
            raise TAGRPOConfigError(
                "TAGRPOConfig.remove_unused_columns=True would drop the dataset's 'neighbors' column before "
                "generation; set remove_unused_columns=False (the GRPOConfig default)."
            )
        self.num_generations = family
        try:
            super().__post_init__()
        except ValueError as err:
            gbs = self.generation_batch_size
            if gbs is not None and gbs % family != 0:
                raise TAGRPOConfigError(
                    f"TAGRPOConfig: generation_batch_size is {gbs} (per_device_train_batch_size="
                    f"{self.per_device_train_batch_size} x processes x steps_per_generation="
                    f"{self.steps_per_generation}), which is not a multiple of the family size "
                    f"(num_neighbors + 1) * samples_per_variant = ({self.num_neighbors} + 1) * "
                    f"{self.samples_per_variant} = {family}. A question's (N+1)*G completions must be "
                    f"generated and normalized together: set generation_batch_size (or "
                    f"per_device_train_batch_size x steps_per_generation) to a multiple of {family}, "
                    f"e.g. per_device_train_batch_size={family}."
                ) from err
            raise
