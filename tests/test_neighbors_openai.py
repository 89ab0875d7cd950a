"""The `openai` backend against a real HTTP server on 127.0.0.1 speaking chat-completions,
injecting faults: 429 with Retry-After, 500, a hung request, malformed JSON, an empty choice, a
refusal, a reply that drops a number. Also: the spend guard, fatal statuses, the CLI killed with
SIGKILL / SIGTERM halfway and resumed without repeating any stored request, and the API key
never appearing in the store, the output or the logs."""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tagrpo.data import read_rows
from tagrpo.neighbors import BackendFatal, BuildOptions, NeighborStore, build_neighbors
from tagrpo.neighbors.openai_backend import OpenAIBackend, RetryPolicy, parse_retry_after
from tagrpo.rewards import normalize_gold

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
REPO = Path(__file__).resolve().parents[1]
KEY = "sk-test-Zq9-very-secret-0123456789"
FAST = RetryPolicy(max_retries=3, backoff_base=0.01, backoff_max=0.05)


class FakeChatServer:
    """A chat-completions server. It rewrites a problem as "Variant <letters>. <problem>"
    (letters from the request seed, so every candidate differs), answers solve requests with
    the gold answer in \\boxed{}, and injects `faults[i]` into the first request it sees for
    question i. It records every request: body hash, question index, kind, status, auth."""

    def __init__(self, questions: list[str], golds: list[str] | None = None, faults: dict[int, str] | None = None,
                 delay: float = 0.0, hang: float = 2.0, status_for_all: int | None = None):
        self.questions = questions
        self.index = {q.strip(): i for i, q in enumerate(questions)}
        self.golds = golds or [""] * len(questions)
        self.faults = dict(faults or {})
        self.delay, self.hang, self.status_for_all = delay, hang, status_for_all
        self.lock = threading.Lock()
        self.log: list[dict] = []
        self.per_question: Counter = Counter()
        self.in_flight = self.max_in_flight = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                server.handle(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.handle_error = lambda request, address: None  # a client that timed out is not an error
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()

    def ok_count(self) -> int:
        with self.lock:
            return sum(1 for e in self.log if e["status"] == 200 and e["fault"] is None)

    def _send(self, h, status: int, payload: bytes, headers: dict | None = None):
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(payload)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(payload)

    @staticmethod
    def completion(content: str | None, choices: bool = True) -> bytes:
        body = {"id": "x", "object": "chat.completion", "model": "fake",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}] if choices else [],
                "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}}
        return json.dumps(body).encode()

    def handle(self, h):
        with self.lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        h.counted = True
        try:
            self._handle(h)
        finally:
            with self.lock:
                self.in_flight -= h.counted

    def _handle(self, h):
        raw = h.rfile.read(int(h.headers.get("Content-Length", 0)))
        data = json.loads(raw)
        user = data["messages"][-1]["content"]
        problem = re.search(r"<problem>\n(.*)\n</problem>", user, re.DOTALL).group(1)
        kind = "solve" if user.startswith("Solve the following") else "transform"
        if kind == "solve":
            idx = next(i for i, q in enumerate(self.questions) if q.strip() in problem)
        else:
            idx = self.index[problem.strip()]
        with self.lock:
            self.per_question[idx] += 1
            first = self.per_question[idx] == 1
            fault = self.faults.get(idx) if first else None
            entry = {"hash": hashlib.sha256(raw).hexdigest()[:32], "q": idx, "kind": kind, "fault": fault,
                     "auth": h.headers.get("Authorization"), "seed": data.get("seed"), "status": 200}
            self.log.append(entry)
        if self.status_for_all is not None:
            entry["status"] = self.status_for_all
            return self._send(h, self.status_for_all, b'{"error": {"message": "nope"}}')
        if self.delay:
            time.sleep(self.delay)
        if fault == "429":
            entry["status"] = 429
            return self._send(h, 429, b'{"error": {"message": "rate limited"}}', {"Retry-After": "1"})
        if fault == "500":
            entry["status"] = 500
            return self._send(h, 500, b'{"error": {"message": "boom"}}')
        if fault == "hang":
            with self.lock:  # the client gives up on this one: it no longer holds a client slot
                self.in_flight -= 1
                h.counted = False
            time.sleep(self.hang)
        if fault == "malformed":
            return self._send(h, 200, b'{"choices": [{"message": {"content": "Variant')
        if fault == "empty":
            return self._send(h, 200, self.completion(None, choices=False))
        if fault == "refusal":
            return self._send(h, 200, self.completion("I'm sorry, but I can't help with rewriting this problem."))
        if fault == "drop_number":
            dropped = re.sub(r"\d+(?:\.\d+)?", "several", problem, count=1)
            return self._send(h, 200, self.completion(dropped))
        if kind == "solve":
            gold = self.golds[idx] if fault != "wrong_answer" else "-1"
            return self._send(h, 200, self.completion(f"Reasoning... so the answer is \\boxed{{{gold}}}."))
        tag = "".join(chr(ord("a") + int(c)) for c in str(data.get("seed", 0)))
        return self._send(h, 200, self.completion(f"Variant {tag}. {problem}"))


@pytest.fixture(scope="module")
def gsm8k():
    return read_rows(DATA / "gsm8k_dev.jsonl")


def _backend(server, store=None, **kw):
    log = store.log_request if store is not None else None
    kw.setdefault("retry", FAST)
    kw.setdefault("timeout", 0.5)
    return OpenAIBackend(model="fake-model", base_url=server.url, api_key=KEY, concurrency=3, log=log, **kw)


FAULTS = {0: "429", 1: "500", 2: "hang", 3: "malformed", 4: "empty", 5: "refusal", 6: "drop_number"}


def test_faults_are_retried_or_rejected_with_the_right_reason(gsm8k, tmp_path):
    rows = gsm8k[:12]
    questions = [r["question"] for r in rows]
    with FakeChatServer(questions, faults=FAULTS) as server, NeighborStore(tmp_path / "s.sqlite") as store:
        out, report = build_neighbors(rows, _backend(server, store), store, BuildOptions(n=2))
        cands = store.candidates()
        log = store.requests()
        server_log = list(server.log)
    # the run completes: every row gets its 2 neighbors despite the faults
    assert [len(o["neighbors"]) for o in out] == [2] * len(rows)
    assert report.rows_complete == len(rows) and report.errors == 0
    for o in out:
        assert all(nb.startswith("Variant ") and nb.endswith(o["question"].strip()) for nb in o["neighbors"])
    # content faults: stored as rejections with the right reason
    qh = {c["question"]: c["question_hash"] for c in cands}
    reasons = {i: sorted(c["reason"] for c in cands if c["question_hash"] == qh[questions[i]] and c["status"] == "rejected")
               for i in range(len(rows))}
    assert reasons[4] == ["empty"] and reasons[5] == ["refusal"] and reasons[6] == ["numbers_changed"]
    assert all(reasons[i] == [] for i in range(len(rows)) if i not in (4, 5, 6))
    assert report.rejected == Counter({"empty": 1, "refusal": 1, "numbers_changed": 1})
    # transport faults: the request log shows each retry, then success
    def outcomes(i):  # attempts of the request that met the fault
        faulted = next(e["hash"] for e in server_log if e["q"] == i)
        return [e["outcome"] for e in log if e["request_hash"] == faulted]
    assert outcomes(0) == ["http_429", "ok"]
    assert outcomes(1) == ["http_500", "ok"]
    assert outcomes(2) == ["timeout", "ok"]
    assert outcomes(3) == ["malformed_json", "ok"]
    assert all(e["question_hash"] == qh[questions[0]] for e in log if e["outcome"] == "http_429")
    retry_429 = next(e for e in log if e["outcome"] == "http_429")
    assert retry_429["retry_after"] == 1.0 and 1.0 <= retry_429["delay"] <= 1.1  # Retry-After honoured
    assert report.retries == 4 and report.requests == len(server_log)
    # the server saw the same body twice for each retried request, and never a third time
    for i in (0, 1, 2, 3):
        first = next(e for e in server_log if e["q"] == i)
        assert sum(e["hash"] == first["hash"] for e in server_log) == 2
    assert all(e["auth"] == f"Bearer {KEY}" for e in server_log)
    assert server.max_in_flight <= 3  # --concurrency 3
    assert report.prompt_tokens == 11 * sum(1 for e in server_log if e["status"] == 200 and e["fault"] not in ("malformed", "hang"))


def test_verify_solve_keeps_only_neighbors_whose_solution_matches(gsm8k, tmp_path):
    rows = gsm8k[20:24]
    questions = [r["question"] for r in rows]
    golds = [normalize_gold(r["answer"]) for r in rows]
    with FakeChatServer(questions, golds=golds) as server, NeighborStore(tmp_path / "v.sqlite") as store:
        out, report = build_neighbors(rows, _backend(server, store), store, BuildOptions(n=1, verify_solve=True))
        kinds = Counter(e["kind"] for e in server.log)
    assert [len(o["neighbors"]) for o in out] == [1, 1, 1, 1]
    assert kinds == Counter({"transform": 4, "solve": 4}) and report.verified == 4
    # now a server whose solver gets question 0 wrong: that neighbor is rejected, a second one tried
    bad = questions[0]
    with FakeChatServer(questions, golds=["-1"] + golds[1:]) as server, NeighborStore(tmp_path / "w.sqlite") as store:
        out, report = build_neighbors(rows, _backend(server, store), store, BuildOptions(n=1, verify_solve=True))
        rejected = [c for c in store.candidates() if c["status"] == "rejected"]
    assert [len(o["neighbors"]) for o in out] == [0, 1, 1, 1]
    assert {c["reason"] for c in rejected} == {"verify_failed"} and len(rejected) == 2  # max_candidates = 2n
    assert all(c["question"] == bad for c in rejected)
    assert report.short_rows == [(rows[0]["id"], 0)]


def test_spend_guard_stops_sending(gsm8k, tmp_path):
    rows = gsm8k[:10]
    with FakeChatServer([r["question"] for r in rows]) as server:
        be = _backend(server, max_requests=5)
        out, report = build_neighbors(rows, be, None, BuildOptions(n=2))
        assert len(server.log) == 5
    assert report.budget_exhausted and report.requests == 5
    assert sum(len(o["neighbors"]) for o in out) == 5


def test_fatal_statuses_stop_the_run_without_leaking_the_key(gsm8k):
    rows = gsm8k[:5]
    with FakeChatServer([r["question"] for r in rows], status_for_all=401) as server:
        with pytest.raises(BackendFatal, match="HTTP 401") as e:
            build_neighbors(rows, _backend(server), None, BuildOptions(n=2))
        assert KEY not in str(e.value)
        assert len(server.log) <= 3  # one per worker at most, no retries


def test_dead_endpoint_gives_up_after_consecutive_failures(gsm8k):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now: connection refused
    be = OpenAIBackend(model="m", base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, concurrency=2,
                       retry=RetryPolicy(max_retries=1, backoff_base=0.01), timeout=1.0, max_consecutive_failures=4)
    with pytest.raises(BackendFatal, match="in a row") as e:
        build_neighbors(gsm8k[:50], be, None, BuildOptions(n=2))
    assert KEY not in str(e.value)
    assert be.stats.outcomes.get("connection_error", 0) >= 8


def test_retry_policy_and_retry_after_parsing():
    rng = random.Random(0)
    p = RetryPolicy(backoff_base=1.0, backoff_max=8.0)
    for r in range(6):
        d = p.delay(r, None, rng)
        cap = min(8.0, 2.0**r)
        assert cap / 2 <= d <= cap
    assert 3.0 <= p.delay(0, 3.0, rng) <= 3.3
    assert RetryPolicy(max_retry_after=5).delay(0, 1000.0, rng) <= 5.5
    assert parse_retry_after("2") == 2.0 and parse_retry_after("0.5") == 0.5
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None
    future = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 30))
    assert 25 <= parse_retry_after(future) <= 31
    assert "sk-" not in repr(OpenAIBackend(model="m", api_key=KEY))


# --- the CLI as a subprocess: SIGKILL / SIGTERM halfway, then resume --------------------------


def _cli(args: list[str], env_extra: dict) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    env.update(env_extra)
    return subprocess.Popen([sys.executable, "-m", "tagrpo.cli", "neighbors", *args], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(pred, timeout=60.0):
    t0 = time.monotonic()
    while not pred():
        if time.monotonic() - t0 > timeout:
            raise AssertionError("timed out waiting")
        time.sleep(0.02)


def _stored_hashes(path: Path) -> set[str]:
    con = sqlite3.connect(path)
    try:
        return {h for (h,) in con.execute("SELECT request_hash FROM candidates WHERE status IN ('accepted', 'rejected')")}
    finally:
        con.close()


@pytest.mark.slow
def test_cli_killed_halfway_resumes_without_repeating_requests(gsm8k, tmp_path):
    rows = gsm8k[:24]
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps({"question": r["question"], "answer": r["answer"]}) + "\n" for r in rows))
    out, store, logf = tmp_path / "out.jsonl", tmp_path / "store.sqlite", tmp_path / "requests.log"
    with FakeChatServer([r["question"] for r in rows], faults={3: "429", 7: "500", 11: "refusal"}, delay=0.08) as server:
        args = ["--input", str(inp), "--output", str(out), "--n", "2", "--backend", "openai", "--model", "fake-model",
                "--base-url", server.url, "--api-key-env", "TAGRPO_TEST_KEY", "--store", str(store),
                "--concurrency", "2", "--timeout", "5", "--backoff-base", "0.01", "--log-file", str(logf), "--no-progress"]
        env = {"TAGRPO_TEST_KEY": KEY}
        transcripts = []

        # run 1: SIGKILL after some answers
        p = _cli(args, env)
        _wait_for(lambda: server.ok_count() >= 12)
        p.kill()
        transcripts += p.communicate(timeout=30)
        assert p.returncode == -signal.SIGKILL and not out.exists()
        stored1 = _stored_hashes(store)
        assert 6 <= len(stored1) < 40  # halfway: 48 neighbors are needed
        mark1 = len(server.log)

        # runs 2 and 3: SIGINT (Ctrl-C), then SIGTERM, after some more: clean interrupts, store kept
        for sig, at in ((signal.SIGINT, 20), (signal.SIGTERM, 28)):
            p = _cli(args, env)
            _wait_for(lambda at=at: server.ok_count() >= at)
            p.send_signal(sig)
            transcripts += p.communicate(timeout=30)
            assert p.returncode == 130 and "interrupted" in transcripts[-1] and not out.exists()
            run = server.log[mark1:]
            assert not {e["hash"] for e in run} & stored1  # nothing stored was asked again
            stored2 = _stored_hashes(store)
            assert len(stored2) > len(stored1)
            stored1, mark1 = stored2, len(server.log)
        mark2 = mark1

        # run 4: to the end
        p = _cli(args, env)
        transcripts += p.communicate(timeout=120)
        assert p.returncode == 0, transcripts[-1]
        run3 = server.log[mark2:]
        assert run3 and not {e["hash"] for e in run3} & stored2
        all_log = list(server.log)

        # run 5: everything is stored: no request at all, same output
        before = out.read_bytes()
        p = _cli(args, env)
        transcripts += p.communicate(timeout=60)
        assert p.returncode == 0 and len(server.log) == len(all_log)
        assert out.read_bytes() == before

    result = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(result) == len(rows) and len({r["question"] for r in result}) == len(rows)
    assert all(len(r["neighbors"]) == 2 and len(set(r["neighbors"])) == 2 for r in result)
    con = sqlite3.connect(store)
    accepted_per_q = Counter(q for (q,) in con.execute("SELECT question_hash FROM candidates WHERE status = 'accepted'"))
    assert sorted(set(accepted_per_q.values())) == [2]  # no extra neighbors from repeated work
    outcomes = Counter(o for (o,) in con.execute("SELECT outcome FROM requests"))
    n_logged = sum(outcomes.values())
    con.close()
    assert outcomes["http_429"] >= 1 and outcomes["http_500"] >= 1  # retries are in the log
    assert "rejected" in transcripts[-2] and "refusal" in transcripts[-2]  # summary table of run 5 (reused)
    # the key was sent, and appears nowhere we write
    assert all(e["auth"] == f"Bearer {KEY}" for e in all_log)
    for f in tmp_path.iterdir():
        assert KEY.encode() not in f.read_bytes(), f
    assert all(KEY not in t for t in transcripts)
    log_lines = [json.loads(line) for line in logf.read_text().splitlines()]
    assert len(log_lines) == n_logged and {"outcome", "attempt", "request_hash"} <= set(log_lines[0])
