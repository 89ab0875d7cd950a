"""SQLite store of neighbor candidates: what makes `tagrpo neighbors` resumable and cheap to re-run.

One row per candidate key (question hash, transformation, backend, model, template version,
sample index) with the text, status (accepted / rejected / skipped / error), rejection reason,
the --verify-solve outcome, the request's hash, token counts and timestamps. Every result is
written in its own transaction (WAL journal), so a run killed at any point (SIGINT, SIGTERM,
SIGKILL) leaves only complete rows; a re-run reuses every stored answer (no request is repeated)
and the primary key rules out duplicate rows. `error` rows (a request that failed after all its
retries) hold no answer and are retried.

A second table, `requests`, logs every HTTP attempt (outcome, status code, Retry-After, backoff
delay, duration) without headers or bodies, so it never holds an API key.

This is TA-GRPO plumbing: plain GRPO has no neighbors to build.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from tagrpo.errors import TagrpoError

SCHEMA_VERSION = "1"
FINAL_STATUSES = ("accepted", "rejected", "skipped")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS candidates (
    question_hash    TEXT NOT NULL,
    transformation   TEXT NOT NULL,
    backend          TEXT NOT NULL,
    model            TEXT NOT NULL,
    template_version TEXT NOT NULL,
    sample_index     INTEGER NOT NULL,
    question         TEXT NOT NULL,
    text             TEXT,
    raw              TEXT,
    status           TEXT NOT NULL CHECK (status IN ('accepted', 'rejected', 'skipped', 'error')),
    reason           TEXT,
    detail           TEXT,
    verified         INTEGER,
    solve_text       TEXT,
    request_hash     TEXT,
    prompt_tokens    INTEGER,
    completion_tokens INTEGER,
    created_at       REAL NOT NULL,
    updated_at       REAL NOT NULL,
    PRIMARY KEY (question_hash, transformation, backend, model, template_version, sample_index)
);
CREATE TABLE IF NOT EXISTS requests (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    ts            REAL NOT NULL,
    kind          TEXT NOT NULL,
    question_hash TEXT,
    transformation TEXT,
    sample_index  INTEGER,
    attempt       INTEGER NOT NULL,
    outcome       TEXT NOT NULL,
    status_code   INTEGER,
    retry_after   REAL,
    delay         REAL,
    duration      REAL,
    request_hash  TEXT
);
"""


def question_hash(question: str) -> str:
    """Stable key of a question's text (sha256 of the stripped text, 32 hex digits)."""
    return hashlib.sha256(question.strip().encode("utf-8")).hexdigest()[:32]


@dataclass(frozen=True)
class CandidateKey:
    """What identifies one candidate neighbor; a change in any part is a new candidate."""

    question_hash: str
    transformation: str
    backend: str
    model: str
    template_version: str
    sample_index: int

    def as_tuple(self) -> tuple:
        return (self.question_hash, self.transformation, self.backend, self.model, self.template_version, self.sample_index)

    def short(self) -> str:
        return f"{self.question_hash[:8]}/{self.transformation}/{self.sample_index}"


@dataclass
class StoredCandidate:
    key: CandidateKey
    text: str | None
    status: str
    reason: str | None
    detail: str | None
    verified: int | None
    request_hash: str | None


_KEY_COLS = "question_hash, transformation, backend, model, template_version, sample_index"
_KEY_WHERE = " AND ".join(f"{c.strip()} = ?" for c in _KEY_COLS.split(","))


class NeighborStore:
    """The candidates and request log of one SQLite file (`":memory:"` for a throw-away run)."""

    def __init__(self, path: str | os.PathLike = ":memory:"):
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).expanduser().parent.mkdir(parents=True, exist_ok=True)
        try:
            self.conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=NORMAL")
            self.conn.executescript(_SCHEMA)
            with self._tx():
                row = self.conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
                if row is None:
                    self.conn.execute("INSERT INTO meta (key, value) VALUES ('schema', ?)", (SCHEMA_VERSION,))
                elif row[0] != SCHEMA_VERSION:
                    raise TagrpoError(f"{self.path}: store schema {row[0]}, this version reads {SCHEMA_VERSION}; use a new --store file")
        except sqlite3.DatabaseError as e:
            raise TagrpoError(f"{self.path}: not a usable SQLite store ({e})") from None

    # --- transactions ---------------------------------------------------------------------
    class _Tx:
        def __init__(self, conn):
            self.conn = conn

        def __enter__(self):
            self.conn.execute("BEGIN IMMEDIATE")
            return self.conn

        def __exit__(self, exc_type, exc, tb):
            self.conn.execute("COMMIT" if exc_type is None else "ROLLBACK")
            return False

    def _tx(self) -> _Tx:
        return self._Tx(self.conn)

    # --- candidates -----------------------------------------------------------------------
    def get(self, key: CandidateKey) -> StoredCandidate | None:
        row = self.conn.execute(
            f"SELECT text, status, reason, detail, verified, request_hash FROM candidates WHERE {_KEY_WHERE}",
            key.as_tuple(),
        ).fetchone()
        return None if row is None else StoredCandidate(key, *row)

    def load_question(self, qhash: str, backend: str, model: str) -> dict[tuple[str, str, int], StoredCandidate]:
        """All stored candidates of one question for a backend/model, keyed by
        (transformation, template_version, sample_index)."""
        rows = self.conn.execute(
            "SELECT transformation, template_version, sample_index, text, status, reason, detail, verified, request_hash "
            "FROM candidates WHERE question_hash = ? AND backend = ? AND model = ?",
            (qhash, backend, model),
        ).fetchall()
        out = {}
        for t, tv, s, *rest in rows:
            out[(t, tv, s)] = StoredCandidate(CandidateKey(qhash, t, backend, model, tv, s), *rest)
        return out

    def put(
        self,
        key: CandidateKey,
        *,
        question: str,
        status: str,
        text: str | None = None,
        raw: str | None = None,
        reason: str | None = None,
        detail: str | None = None,
        verified: int | None = None,
        solve_text: str | None = None,
        request_hash: str | None = None,
        prompt_tokens: int | None = None,
        completion_tokens: int | None = None,
    ) -> None:
        """Insert or replace one candidate, in one transaction (created_at is kept)."""
        now = time.time()
        with self._tx() as c:
            c.execute(
                f"INSERT INTO candidates ({_KEY_COLS}, question, text, raw, status, reason, detail, verified, solve_text, "
                "request_hash, prompt_tokens, completion_tokens, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                f"ON CONFLICT ({_KEY_COLS}) DO UPDATE SET question = excluded.question, text = excluded.text, "
                "raw = excluded.raw, status = excluded.status, reason = excluded.reason, detail = excluded.detail, "
                "verified = excluded.verified, solve_text = excluded.solve_text, request_hash = excluded.request_hash, "
                "prompt_tokens = excluded.prompt_tokens, completion_tokens = excluded.completion_tokens, "
                "updated_at = excluded.updated_at",
                (*key.as_tuple(), question, text, raw, status, reason, detail, verified, solve_text, request_hash,
                 prompt_tokens, completion_tokens, now, now),
            )

    def update(self, key: CandidateKey, **fields) -> None:
        """Change some columns of an existing candidate (status, reason, detail, verified, solve_text)."""
        allowed = {"status", "reason", "detail", "verified", "solve_text"}
        bad = set(fields) - allowed
        if bad:
            raise ValueError(f"cannot update {sorted(bad)}; allowed: {sorted(allowed)}")
        sets = ", ".join(f"{k} = ?" for k in fields)
        with self._tx() as c:
            c.execute(
                f"UPDATE candidates SET {sets}, updated_at = ? WHERE {_KEY_WHERE}",
                (*fields.values(), time.time(), *key.as_tuple()),
            )

    # --- request log ----------------------------------------------------------------------
    def log_request(self, entry: dict) -> None:
        cols = ("ts", "kind", "question_hash", "transformation", "sample_index", "attempt", "outcome",
                "status_code", "retry_after", "delay", "duration", "request_hash")
        with self._tx() as c:
            c.execute(
                f"INSERT INTO requests ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                (entry.get("ts") or time.time(), *(entry.get(k) for k in cols[1:])),
            )

    def requests(self) -> list[dict]:
        cur = self.conn.execute("SELECT * FROM requests ORDER BY id")
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row)) for row in cur.fetchall()]

    def candidates(self) -> list[dict]:
        cur = self.conn.execute("SELECT * FROM candidates ORDER BY question_hash, transformation, sample_index")
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row)) for row in cur.fetchall()]

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> NeighborStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

