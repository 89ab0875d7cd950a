"""The SQLite store: one row per candidate key, upserts instead of duplicates, persistence
across connections, and clear errors for a file that is not a store."""

from __future__ import annotations

import sqlite3

import pytest

from tagrpo.errors import TagrpoError
from tagrpo.neighbors import RuleBackend, build_neighbors
from tagrpo.neighbors.builder import BuildOptions
from tagrpo.neighbors.store import CandidateKey, NeighborStore, question_hash


def key(s=0, t="paraphrase"):
    return CandidateKey(question_hash("What is 2+2?"), t, "openai", "m", "paraphrase-v1-abc", s)


def test_put_get_upsert_and_persist(tmp_path):
    path = tmp_path / "s.sqlite"
    with NeighborStore(path) as st:
        st.put(key(), question="What is 2+2?", status="error", reason="request_failed", detail="HTTP 500")
        st.put(key(), question="What is 2+2?", status="accepted", text="Compute 2+2.", request_hash="h1")
        st.put(key(1), question="What is 2+2?", status="rejected", text="4", reason="answer_not_question")
        st.update(key(1), verified=0)
    with NeighborStore(path) as st:
        rows = st.candidates()
        assert len(rows) == 2
        got = st.get(key())
        assert (got.status, got.text, got.reason, got.request_hash) == ("accepted", "Compute 2+2.", None, "h1")
        assert rows[0]["created_at"] <= rows[0]["updated_at"]
        loaded = st.load_question(key().question_hash, "openai", "m")
        assert set(loaded) == {("paraphrase", "paraphrase-v1-abc", 0), ("paraphrase", "paraphrase-v1-abc", 1)}
        assert st.get(key(2)) is None
        with pytest.raises(ValueError):
            st.update(key(), text="x")
    con = sqlite3.connect(path)
    n, distinct = con.execute(
        "SELECT COUNT(*), COUNT(DISTINCT question_hash || transformation || backend || model || template_version || sample_index) FROM candidates"
    ).fetchone()
    assert n == distinct == 2


def test_request_log(tmp_path):
    with NeighborStore(tmp_path / "s.sqlite") as st:
        st.log_request({"kind": "transform", "attempt": 1, "outcome": "http_429", "retry_after": 1.0, "delay": 1.02})
        st.log_request({"kind": "transform", "attempt": 2, "outcome": "ok", "status_code": 200})
        log = st.requests()
    assert [(r["attempt"], r["outcome"]) for r in log] == [(1, "http_429"), (2, "ok")]
    assert log[0]["retry_after"] == 1.0 and log[0]["ts"] > 0


def test_not_a_store(tmp_path):
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(TagrpoError, match="not a usable SQLite store"):
        NeighborStore(bad)
    old = tmp_path / "old.sqlite"
    with NeighborStore(old) as st:
        st.conn.execute("UPDATE meta SET value = '0' WHERE key = 'schema'")
    with pytest.raises(TagrpoError, match="schema"):
        NeighborStore(old)


def test_rules_rerun_reuses_the_store(tmp_path):
    rows = [{"id": i, "question": f"Tom has {i + 2} apples. Mary gives him 3 more. How many apples does Tom have?", "answer": f"#### {i + 5}"}
            for i in range(10)]
    path = tmp_path / "rules.sqlite"
    with NeighborStore(path) as st:
        first, r1 = build_neighbors(rows, RuleBackend(seed=1), st, BuildOptions(n=3))
    with NeighborStore(path) as st:
        second, r2 = build_neighbors(rows, RuleBackend(seed=1), st, BuildOptions(n=3))
        n_rows = len(st.candidates())
    assert first == second
    assert r1.new > 0 and r1.reused == 0
    assert r2.new == 0 and r2.reused == r1.new
    assert n_rows == r1.new
    with NeighborStore(path) as st:  # another seed is another set of keys
        _, r3 = build_neighbors(rows, RuleBackend(seed=2), st, BuildOptions(n=3))
    assert r3.reused == 0 and r3.new > 0


def test_repeated_question_is_built_once():
    q = "Tom has 4 apples. Mary gives him 3 more. How many apples does Tom have?"
    rows = [{"id": "a", "question": q, "answer": "7"}, {"id": "b", "question": q, "answer": "7"}]
    out, report = build_neighbors(rows, RuleBackend(), None, BuildOptions(n=2))
    assert [o["id"] for o in out] == ["a", "b"]
    assert out[0]["neighbors"] == out[1]["neighbors"] and len(out[0]["neighbors"]) == 2
    assert report.new == 2 and report.rows_complete == 2
