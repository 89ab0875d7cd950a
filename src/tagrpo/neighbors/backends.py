"""The backend interface of the neighbor builder, and the offline `rules` backend.

A backend turns jobs ("make candidate k of transformation t for this question", or, for
--verify-solve, "solve this neighbor") into replies. The builder decides which jobs to run,
validates and stores the replies; backends only produce text and count requests and tokens.
Backends: `rules` (here), `openai` (`openai_backend.py`), `hf` (`hf_backend.py`).

This is the TA-GRPO data step; plain GRPO trains on the original questions only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from tagrpo.errors import TagrpoError
from tagrpo.neighbors import rules
from tagrpo.neighbors.store import CandidateKey


@dataclass
class Job:
    """One unit of backend work. `kind` is "transform" (rewrite `question`) or "solve" (solve
    `text`, a neighbor of `question`, for --verify-solve)."""

    key: CandidateKey
    question: str
    kind: str = "transform"
    text: str | None = None


@dataclass
class Reply:
    """A backend's answer to a job: `text` (cleaned), the `raw` reply, or `error` when the job
    failed after all retries (nothing is stored as an answer then, and a re-run tries again)."""

    text: str | None = None
    raw: str | None = None
    refusal: bool = False
    not_applicable: bool = False
    error: str | None = None
    request_hash: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


@dataclass
class BackendStats:
    """Counters of one run: requests sent (every attempt), retries, failed jobs, tokens."""

    requests: int = 0
    retries: int = 0
    failed: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    tokens_reported: bool = False
    outcomes: dict[str, int] = field(default_factory=dict)

    def count(self, outcome: str) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1


class BackendFatal(TagrpoError):
    """The endpoint cannot serve this run (bad key, unknown model, wrong URL, or every request
    failing): stop instead of burning through the whole dataset."""


OnReply = Callable[[Job, Reply], None]


class Backend(Protocol):
    name: str
    model: str
    transformations: tuple[str, ...]
    stats: BackendStats
    budget_exhausted: bool

    def template_version(self, transformation: str) -> str: ...

    def run(self, jobs: Sequence[Job], on_reply: OnReply) -> None:
        """Run the jobs (in any order, possibly concurrently) and call on_reply once per finished
        job, from the calling thread. Jobs not started because the spend guard was reached get
        no reply and set `budget_exhausted`."""
        ...

    def close(self) -> None: ...


class RequestBudget:
    """The --max-requests spend guard: `take()` is False once `limit` requests were sent."""

    def __init__(self, limit: int | None):
        if limit is not None and limit < 0:
            raise ValueError(f"--max-requests must be >= 0, got {limit}")
        self.limit = limit
        self.used = 0

    def take(self) -> bool:
        if self.limit is not None and self.used >= self.limit:
            return False
        self.used += 1
        return True


class RuleBackend:
    """Offline rule transformations (`tagrpo.neighbors.rules`), deterministic given `seed`."""

    name = "rules"
    model = "rules"
    transformations = rules.TRANSFORMATIONS

    def __init__(self, seed: int = 0):
        self.seed = seed
        self.stats = BackendStats()
        self.budget_exhausted = False

    def template_version(self, transformation: str) -> str:
        return f"{rules.RULES_VERSION}-seed{self.seed}"

    def run(self, jobs: Sequence[Job], on_reply: OnReply) -> None:
        for job in jobs:
            if job.kind != "transform":
                raise TagrpoError("--verify-solve needs a model: use --backend openai or --backend hf")
            text = rules.transform(job.question, job.key.transformation, job.key.sample_index, self.seed)
            on_reply(job, Reply(text=text, raw=text, not_applicable=text is None))

    def close(self) -> None:
        pass
