"""The neighbor builder's data: its options, its report, and the per-question plan state.

`BuildOptions` (what to build) and `BuildReport` (what a run did) are public and re-exported from
`tagrpo.neighbors.builder` and `tagrpo.neighbors`. `_Candidate` (one planned (transformation,
sample index) slot and what became of it) and `_Family` (one question, its plan and its accepted
neighbors) are the builder's working state; `NeighborBuilder` in `builder.py` runs the plan.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from tagrpo.neighbors.store import CandidateKey, StoredCandidate
from tagrpo.neighbors.validate import ValidationConfig


@dataclass(frozen=True)
class BuildOptions:
    """`n` neighbors per question from `transformations` (default: all of the backend's), trying
    at most `max_candidates` per question (default 6n for rules, 2n for model backends)."""

    n: int = 3
    transformations: tuple[str, ...] | None = None
    max_candidates: int | None = None
    verify_solve: bool = False
    validation: ValidationConfig = field(default_factory=ValidationConfig)

    def __post_init__(self):
        if self.n < 1:
            raise ValueError(f"--n must be >= 1, got {self.n}")
        if self.max_candidates is not None and self.max_candidates < 1:
            raise ValueError(f"--max-candidates must be >= 1, got {self.max_candidates}")


@dataclass
class BuildReport:
    """What a run did. `rejected` counts candidates by reason (reused ones included)."""

    rows: int = 0
    n: int = 0
    neighbors: int = 0
    rows_complete: int = 0
    short_rows: list[tuple[object, int]] = field(default_factory=list)
    rejected: Counter = field(default_factory=Counter)
    not_applicable: int = 0
    errors: int = 0
    new: int = 0
    reused: int = 0
    verified: int = 0
    requests: int = 0
    retries: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    budget_exhausted: bool = False

    @property
    def accepted(self) -> int:
        return self.neighbors


@dataclass
class _Candidate:
    index: int
    key: CandidateKey
    status: str | None = None  # None while not yet answered in this run
    text: str | None = None
    verified: int | None = None
    norm: str | None = None  # normalized text, for duplicate checks


@dataclass
class _Family:
    row: dict
    question: str
    gold: str
    qhash: str
    plan: list[_Candidate]
    stored: dict[tuple[str, str, int], StoredCandidate]
    next: int = 0
    accepted: list[_Candidate] = field(default_factory=list)
    norm: str = ""

    def exhausted(self) -> bool:
        return self.next >= len(self.plan)
