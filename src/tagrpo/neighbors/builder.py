"""The neighbor builder: N validated, distinct, problem-equivalent rewordings per question.

Step 1 of TA-GRPO (plain GRPO has no such step). For every question the builder walks a fixed,
ordered plan of candidates, (transformation, sample index) pairs cycling through the
transformations, and asks the backend only for as many as are still needed:

    round: take the next (N - accepted) candidates of every unfinished question
           -> stored answer? reuse it (no request) : send a job to the backend
           -> validate each reply, store it (accepted / rejected + reason / error)
           -> settle: in plan order, drop duplicates of earlier siblings
           -> with --verify-solve: ask the model to solve each new accepted neighbor and keep
              it only if `math_reward(solution, gold)` is 1
    repeat until every question has N or its plan (`max_candidates`) is used up.

Because the plan and the settling are in a fixed order, the output does not depend on which
request finished first, and a re-run over the same store reproduces it without any request.

Here: `NeighborBuilder` (plan, record, settle, run) and `build_neighbors`. The options, the report
and the per-question state are data classes in `build_state.py` (re-exported here).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from tagrpo.neighbors.backends import Backend, Job, Reply
from tagrpo.neighbors.build_state import BuildOptions, BuildReport, _Candidate, _Family
from tagrpo.neighbors.store import (
    FINAL_STATUSES,
    CandidateKey,
    NeighborStore,
    StoredCandidate,
    question_hash,
)
from tagrpo.neighbors.text import normalize_text
from tagrpo.neighbors.validate import REASONS, Verdict, validate_neighbor

Progress = Callable[[dict], None]


class NeighborBuilder:
    """Runs the plan for a list of rows against one backend and one store."""

    def __init__(self, backend: Backend, store: NeighborStore, options: BuildOptions, progress: Progress | None = None):
        self.backend = backend
        self.store = store
        self.options = options
        self.progress = progress
        supported = tuple(backend.transformations)
        chosen = tuple(options.transformations) if options.transformations else supported
        bad = [t for t in chosen if t not in supported]
        if bad:
            raise ValueError(
                f"transformation(s) {', '.join(bad)} not available with --backend {backend.name}; choose from {', '.join(supported)}"
            )
        if options.verify_solve and backend.name == "rules":
            raise ValueError("--verify-solve needs a model to solve the neighbors: use --backend openai or --backend hf")
        self.transformations = chosen
        default = max(8, 6 * options.n) if backend.name == "rules" else 2 * options.n
        self.max_candidates = options.max_candidates or default
        self.report = BuildReport(n=options.n)
        self._families: list[_Family] = []
        self._rows: list[dict] = []
        self._row_family: list[_Family] = []
        self._last_emit = float("-inf")

    # --- planning -------------------------------------------------------------------------
    def _family(self, row: dict) -> _Family:
        from tagrpo.rewards.extract import normalize_gold

        question = row["question"]
        qh = question_hash(question)
        plan = []
        s = 0
        while len(plan) < self.max_candidates:
            for t in self.transformations:
                if len(plan) >= self.max_candidates:
                    break
                key = CandidateKey(qh, t, self.backend.name, self.backend.model, self.backend.template_version(t), s)
                plan.append(_Candidate(len(plan), key))
            s += 1
        stored = self.store.load_question(qh, self.backend.name, self.backend.model)
        return _Family(row, question, normalize_gold(row["answer"]), qh, plan, stored, norm=normalize_text(question))

    def _emit(self, force: bool = False) -> None:
        """Report progress, at most every 0.1 s unless forced."""
        if self.progress is None:
            return
        now = time.monotonic()
        if not force and now - self._last_emit < 0.1:
            return
        self._last_emit = now
        done = sum(1 for f in self._families if len(f.accepted) >= self.options.n or (f.exhausted() and self._settled(f)))
        self.progress({
            "done": done,
            "total": len(self._families),
            "accepted": sum(len(f.accepted) for f in self._families),
            "rejected": sum(self.report.rejected.values()),
            "requests": self.backend.stats.requests,
        })

    @staticmethod
    def _settled(f: _Family) -> bool:
        return all(c.status is not None for c in f.plan[: f.next])

    # --- replies --------------------------------------------------------------------------
    def _record_transform(self, f: _Family, c: _Candidate, reply: Reply) -> None:
        key = c.key
        common = dict(question=f.question, raw=reply.raw, request_hash=reply.request_hash,
                      prompt_tokens=reply.prompt_tokens, completion_tokens=reply.completion_tokens)
        if reply.error is not None:
            self.store.put(key, status="error", reason="request_failed", detail=reply.error, **common)
            c.status = "error"
            self.report.errors += 1
            return
        self.report.new += 1
        if reply.not_applicable:
            self.store.put(key, status="skipped", reason="not_applicable", **common)
            c.status = "skipped"
            self.report.not_applicable += 1
            return
        if reply.refusal:
            verdict = Verdict.reject("refusal", "the API flagged the reply as a refusal")
        else:
            verdict = validate_neighbor(f.question, reply.text, f.gold, config=self.options.validation)
        status = "accepted" if verdict.ok else "rejected"
        self.store.put(key, status=status, text=reply.text, reason=verdict.reason,
                       detail=None if verdict.ok else verdict.detail, **common)
        c.status, c.text = status, reply.text
        if not verdict.ok:
            self.report.rejected[verdict.reason] += 1

    def _record_solve(self, f: _Family, c: _Candidate, reply: Reply) -> None:
        from tagrpo.rewards import math_reward

        if reply.error is not None:
            # unknown this run: not used; the store keeps it unverified, so a re-run asks again
            self.report.errors += 1
            c.status = "error"
            return
        if math_reward(reply.text or "", f.row["answer"]) >= 1.0:
            self.store.update(c.key, verified=1, solve_text=reply.raw)
            c.verified = 1
            self.report.verified += 1
        else:
            self.store.update(c.key, verified=0, solve_text=reply.raw, status="rejected", reason="verify_failed",
                              detail=REASONS["verify_failed"])
            c.status, c.verified = "rejected", 0
            self.report.rejected["verify_failed"] += 1

    def _reuse(self, c: _Candidate, st: StoredCandidate) -> None:
        self.report.reused += 1
        c.status, c.text, c.verified = st.status, st.text, st.verified
        if st.status == "rejected":
            self.report.rejected[st.reason or "rejected"] += 1
        elif st.status == "skipped":
            self.report.not_applicable += 1

    # --- settling -------------------------------------------------------------------------
    def _settle(self, f: _Family) -> None:
        """Accepted candidates in plan order; a later duplicate of an earlier one is rejected.
        With --verify-solve, accepted ones still waiting for their solve are kept (pending)."""
        seen = {f.norm}
        accepted = []
        for c in f.plan[: f.next]:
            if c.status != "accepted":
                continue
            if c.norm is None:
                c.norm = normalize_text(c.text or "")
            norm = c.norm
            if norm in seen:
                self.store.update(c.key, status="rejected", reason="duplicate_sibling", detail=REASONS["duplicate_sibling"])
                c.status = "rejected"
                self.report.rejected["duplicate_sibling"] += 1
                continue
            seen.add(norm)
            accepted.append(c)
        f.accepted = accepted

    # --- the run --------------------------------------------------------------------------
    def _transform_round(self) -> bool:
        """One round of transform jobs; False when no question advanced in its plan."""
        jobs: list[tuple[_Family, _Candidate]] = []
        advanced = False
        for f in self._families:
            need = self.options.n - len(f.accepted)
            while need > 0 and not f.exhausted():
                c = f.plan[f.next]
                f.next += 1
                advanced = True
                st = f.stored.get((c.key.transformation, c.key.template_version, c.key.sample_index))
                if st is not None and st.status in FINAL_STATUSES:
                    self._reuse(c, st)
                    if st.status == "accepted":
                        need -= 1
                    continue
                jobs.append((f, c))
                need -= 1
        if jobs:
            by_key = {c.key: (f, c) for f, c in jobs}

            def on_reply(job: Job, reply: Reply) -> None:
                f, c = by_key[job.key]
                self._record_transform(f, c, reply)
                self._emit()

            self.backend.run([Job(c.key, f.question) for f, c in jobs], on_reply)
        for f in self._families:
            self._settle(f)
        return advanced

    def _verify_round(self) -> None:
        """Solve every accepted, not yet verified neighbor; keep those whose answer is gold."""
        jobs = [(f, c) for f in self._families for c in f.accepted if c.verified is None]
        if not jobs:
            return
        by_key = {c.key: (f, c) for f, c in jobs}

        def on_reply(job: Job, reply: Reply) -> None:
            f, c = by_key[job.key]
            self._record_solve(f, c, reply)
            self._emit()

        self.backend.run([Job(c.key, f.question, kind="solve", text=c.text) for f, c in jobs], on_reply)
        for f in self._families:
            self._settle(f)

    def build(self, rows: Sequence[dict]) -> tuple[list[dict], BuildReport]:
        """Rows with `neighbors` (up to n each), and the report."""
        by_question: dict[str, _Family] = {}
        self._rows = list(rows)
        self._row_family = []
        for row in self._rows:  # a question repeated in the input is built once
            qh = question_hash(row["question"])
            if qh not in by_question:
                by_question[qh] = self._family(row)
            self._row_family.append(by_question[qh])
        self._families = list(by_question.values())
        self.report.rows = len(rows)
        self._emit(force=True)
        while not self.backend.budget_exhausted:
            advanced = self._transform_round()
            if self.options.verify_solve and not self.backend.budget_exhausted:
                self._verify_round()
            self._emit(force=True)
            if not advanced:
                break
        return self._finish()

    def _finish(self) -> tuple[list[dict], BuildReport]:
        r = self.report
        out = []
        for row, f in zip(self._rows, self._row_family):
            texts = [c.text for c in f.accepted if not self.options.verify_solve or c.verified == 1][: self.options.n]
            out.append({**row, "neighbors": texts})
            r.neighbors += len(texts)
            if len(texts) >= self.options.n:
                r.rows_complete += 1
            else:
                r.short_rows.append((row.get("id"), len(texts)))
        stats = self.backend.stats
        r.requests, r.retries = stats.requests, stats.retries
        if stats.tokens_reported:
            r.prompt_tokens, r.completion_tokens = stats.prompt_tokens, stats.completion_tokens
        r.budget_exhausted = self.backend.budget_exhausted
        return out, r


def build_neighbors(
    rows: Sequence[dict],
    backend: Backend,
    store: NeighborStore | None = None,
    options: BuildOptions | None = None,
    progress: Progress | None = None,
) -> tuple[list[dict], BuildReport]:
    """Add `neighbors` to each row (rows as returned by `tagrpo.data.read_rows`)."""
    own = store is None
    store = store or NeighborStore(":memory:")
    try:
        return NeighborBuilder(backend, store, options or BuildOptions(), progress).build(rows)
    finally:
        if own:
            store.close()
