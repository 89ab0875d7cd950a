"""`openai` backend: neighbors from any OpenAI-compatible chat-completions endpoint.

GPT-4-class APIs, a vLLM server (`vllm serve MODEL` -> http://localhost:8000/v1) or a llama.cpp
server (`llama-server -m MODEL.gguf` -> http://localhost:8080/v1) all speak this protocol. The
paper made TA-GRPO's neighbors with GPT-4-Turbo; plain GRPO needs no such step.

Robust for a run over thousands of questions against a paid API:
- bounded concurrency (`concurrency` requests in flight, one httpx.AsyncClient);
- a request timeout; retries with exponential backoff and jitter on 429 (honouring
  `Retry-After`), 408, 5xx, connection errors, timeouts and unparseable replies;
- a spend guard (`max_requests`: every attempt counts);
- 401/403/404 stop the run at once (bad key, model or URL), and so do `max_consecutive_failures`
  jobs in a row failing after all their retries;
- the API key is held in one private attribute, sent only in the Authorization header, and
  scrubbed from every error text; it is never logged, printed or stored.

Every attempt is reported to `log` (the store's `requests` table): outcome, status code,
Retry-After, backoff delay, duration, and the sha256 of the request body (which the store keeps
beside the answer, so a test server can tell which requests were repeated).

Here: the request (body, its exact bytes and hash), the transport and the retry loop. The retry
policy and Retry-After parsing are in `openai_retry.py`, the reading of a reply's JSON into a
`Reply` in `openai_reply.py`; `RetryPolicy` and `parse_retry_after` are re-exported here.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import time
from collections.abc import Callable, Sequence

from tagrpo.neighbors.backends import BackendFatal, BackendStats, Job, OnReply, Reply, RequestBudget
from tagrpo.neighbors.openai_reply import BadReply, reply_from_choice, reply_usage
from tagrpo.neighbors.openai_retry import RetryPolicy, parse_retry_after
from tagrpo.neighbors.prompts import LLM_TRANSFORMATIONS, SOLVE, TEMPLATES, clean_response

DEFAULT_BASE_URL = "https://api.openai.com/v1"


def request_hash(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()[:32]


def encode_body(body: dict) -> bytes:
    """The exact bytes sent (sorted keys, compact), so the body hash is reproducible."""
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


class OpenAIBackend:
    """Chat-completions client for neighbor transformations and --verify-solve."""

    name = "openai"
    transformations = LLM_TRANSFORMATIONS

    def __init__(
        self,
        *,
        model: str,
        base_url: str = DEFAULT_BASE_URL,
        api_key: str | None = None,
        concurrency: int = 4,
        timeout: float = 60.0,
        retry: RetryPolicy | None = None,
        max_requests: int | None = None,
        temperature: float = 0.7,
        max_tokens: int = 1024,
        seed: int = 0,
        log: Callable[[dict], None] | None = None,
        max_consecutive_failures: int = 10,
        transport=None,
    ):
        if not model:
            raise ValueError("--model is required with --backend openai (e.g. gpt-4o, or the model name your server serves)")
        if concurrency < 1:
            raise ValueError(f"--concurrency must be >= 1, got {concurrency}")
        if timeout <= 0:
            raise ValueError(f"--timeout must be > 0 seconds, got {timeout}")
        self.model = model
        self.url = base_url.rstrip("/") + "/chat/completions"
        self._api_key = api_key or None
        self.concurrency = concurrency
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self.budget = RequestBudget(max_requests)
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.seed = seed
        self.log = log
        self.max_consecutive_failures = max_consecutive_failures
        self._transport = transport
        self._rng = random.Random(seed)
        self._consecutive_failures = 0
        self.stats = BackendStats()
        self.budget_exhausted = False

    def __repr__(self) -> str:  # never show the key
        return f"OpenAIBackend(model={self.model!r}, url={self.url!r}, key={'set' if self._api_key else 'none'})"

    # --- prompts --------------------------------------------------------------------------
    def template_version(self, transformation: str) -> str:
        if transformation not in TEMPLATES:
            raise ValueError(f"unknown LLM transformation {transformation!r}; choose from {', '.join(TEMPLATES)}")
        return TEMPLATES[transformation].version

    def body(self, job: Job) -> dict:
        """The chat-completions request body of a job."""
        key_digest = hashlib.sha256(repr(job.key.as_tuple()).encode("utf-8")).hexdigest()
        body: dict = {"model": self.model, "n": 1, "seed": int(key_digest[:8], 16) % (2**31)}
        if job.kind == "solve":
            body["messages"] = SOLVE.messages(job.text or "")
            body["temperature"] = 0.0
        else:
            body["messages"] = TEMPLATES[job.key.transformation].messages(job.question)
            body["temperature"] = self.temperature
        if self.max_tokens and self.max_tokens > 0:
            body["max_tokens"] = self.max_tokens
        return body

    # --- helpers --------------------------------------------------------------------------
    def _redact(self, text: str) -> str:
        if self._api_key:
            text = text.replace(self._api_key, "***")
        return text

    def _log(self, job: Job, **entry) -> None:
        self.stats.count(entry["outcome"])
        if self.log is not None:
            self.log({
                "ts": time.time(), "kind": job.kind, "question_hash": job.key.question_hash,
                "transformation": job.key.transformation, "sample_index": job.key.sample_index, **entry,
            })

    def _parse(self, data, rh: str) -> Reply:
        pt, ct = reply_usage(data)  # counted even when the choice below is unreadable
        if pt is not None or ct is not None:
            self.stats.tokens_reported = True
            self.stats.prompt_tokens += pt or 0
            self.stats.completion_tokens += ct or 0
        return reply_from_choice(data, rh, pt, ct)

    # --- one job --------------------------------------------------------------------------
    async def _one(self, client, job: Job) -> Reply | None:
        import httpx

        content = encode_body(self.body(job))
        rh = request_hash(content)
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        last_error = "no attempt made"
        for attempt in range(1, self.retry.max_retries + 2):
            if not self.budget.take():
                self.budget_exhausted = True
                return None
            self.stats.requests += 1
            t0 = time.monotonic()
            status = retry_after = None
            retryable = False
            try:
                resp = await client.post(self.url, content=content, headers=headers)
            except httpx.TimeoutException:
                outcome, retryable, last_error = "timeout", True, f"no reply within {self.timeout:g} s"
            except httpx.TransportError as e:
                outcome, retryable = "connection_error", True
                last_error = self._redact(f"{type(e).__name__}: {e}")
            else:
                status = resp.status_code
                if status == 429 or status == 408 or status >= 500:
                    outcome, retryable, last_error = f"http_{status}", True, f"HTTP {status}"
                    retry_after = parse_retry_after(resp.headers.get("retry-after"))
                elif status in (401, 403, 404):
                    self._log(job, attempt=attempt, outcome=f"http_{status}", status_code=status,
                              duration=time.monotonic() - t0, request_hash=rh)
                    hint = {401: "check the key in the environment variable named by --api-key-env",
                            403: "the key may lack access to this model",
                            404: "check --base-url (it usually ends in /v1) and --model"}[status]
                    raise BackendFatal(
                        f"{self.url} answered HTTP {status} ({hint}): {self._redact(resp.text[:300])}"
                    )
                elif status >= 400:
                    outcome, last_error = f"http_{status}", self._redact(f"HTTP {status}: {resp.text[:300]}")
                else:
                    try:
                        reply = self._parse(resp.json(), rh)
                    except (json.JSONDecodeError, UnicodeDecodeError, BadReply) as e:
                        outcome, retryable = "malformed_json", True
                        last_error = f"unreadable reply: {type(e).__name__}"
                    else:
                        self._log(job, attempt=attempt, outcome="ok", status_code=status,
                                  duration=time.monotonic() - t0, request_hash=rh)
                        if job.kind == "transform" and not reply.refusal:
                            reply.text = clean_response(reply.raw)
                        return reply
            duration = time.monotonic() - t0
            if retryable and attempt <= self.retry.max_retries:
                delay = self.retry.delay(attempt - 1, retry_after, self._rng)
                self.stats.retries += 1
                self._log(job, attempt=attempt, outcome=outcome, status_code=status, retry_after=retry_after,
                          delay=delay, duration=duration, request_hash=rh)
                await asyncio.sleep(delay)
                continue
            self._log(job, attempt=attempt, outcome=outcome, status_code=status, retry_after=retry_after,
                      duration=duration, request_hash=rh)
            break
        self.stats.failed += 1
        return Reply(error=last_error, request_hash=rh)

    # --- many jobs ------------------------------------------------------------------------
    async def _run(self, jobs: Sequence[Job], on_reply: OnReply) -> None:
        import httpx

        limits = httpx.Limits(max_connections=self.concurrency, max_keepalive_connections=self.concurrency)
        pending = iter(jobs)
        fatal: list[BaseException] = []

        async with httpx.AsyncClient(timeout=httpx.Timeout(self.timeout), limits=limits,
                                     transport=self._transport, trust_env=True) as client:

            async def worker() -> None:
                for job in pending:  # one shared iterator: each job is taken once
                    if fatal or self.budget_exhausted:
                        return
                    try:
                        reply = await self._one(client, job)
                    except BackendFatal as e:
                        fatal.append(e)
                        return
                    if reply is None:
                        return
                    on_reply(job, reply)
                    if reply.error is None:
                        self._consecutive_failures = 0
                        continue
                    self._consecutive_failures += 1
                    if self.max_consecutive_failures and self._consecutive_failures >= self.max_consecutive_failures:
                        fatal.append(BackendFatal(
                            f"{self._consecutive_failures} requests in a row to {self.url} failed after "
                            f"{self.retry.max_retries} retries each (last: {reply.error}); check the server, "
                            "then re-run the same command: stored answers are kept"
                        ))
                        return

            await asyncio.gather(*(worker() for _ in range(self.concurrency)))
        if fatal:
            raise fatal[0]

    def run(self, jobs: Sequence[Job], on_reply: OnReply) -> None:
        if jobs:
            asyncio.run(self._run(jobs, on_reply))

    def close(self) -> None:
        pass

