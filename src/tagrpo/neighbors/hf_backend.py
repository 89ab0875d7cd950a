"""`hf` backend: neighbors from a local transformers chat model (offline).

Uses `tagrpo.models.load_policy`, so the embedded SmolLM2-135M-Instruct works out of the box
(`--model smollm2-135m-instruct`, the default), as does any local directory or cached Hugging
Face id. A 135M model rewrites poorly: validation shows how many of its neighbors survive, and a
bigger local model (or the `openai` backend pointed at a local vLLM / llama.cpp server) does
better. Same prompts as the `openai` backend; generation is batched and seeded per batch.

TA-GRPO needs the neighbors; plain GRPO trains on the originals only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from tagrpo.models import EMBEDDED_NAME
from tagrpo.neighbors.backends import BackendStats, Job, OnReply, Reply, RequestBudget
from tagrpo.neighbors.prompts import LLM_TRANSFORMATIONS, SOLVE, TEMPLATES, clean_response


class HFBackend:
    """Batched `generate` with a local chat model; one generation counts as one request."""

    name = "hf"
    transformations = LLM_TRANSFORMATIONS

    def __init__(
        self,
        model: str = EMBEDDED_NAME,
        *,
        batch_size: int = 8,
        temperature: float = 0.7,
        max_new_tokens: int = 384,
        max_requests: int | None = None,
        device: str = "cpu",
        seed: int = 0,
    ):
        if batch_size < 1:
            raise ValueError(f"--batch-size must be >= 1, got {batch_size}")
        self.model = str(model)
        self.batch_size = batch_size
        self.temperature = temperature
        self.max_new_tokens = max_new_tokens
        self.device = device
        self.seed = seed
        self.budget = RequestBudget(max_requests)
        self.stats = BackendStats()
        self.budget_exhausted = False
        self._model = None
        self._tok = None

    def template_version(self, transformation: str) -> str:
        if transformation not in TEMPLATES:
            raise ValueError(f"unknown LLM transformation {transformation!r}; choose from {', '.join(TEMPLATES)}")
        return TEMPLATES[transformation].version

    def _load(self):
        if self._model is None:
            from tagrpo.models import load_policy

            self._model, self._tok = load_policy(self.model, device=self.device)
        return self._model, self._tok

    def _prompt(self, tok, job: Job) -> str:
        if job.kind == "solve":
            messages = SOLVE.messages(job.text or "")
        else:
            messages = TEMPLATES[job.key.transformation].messages(job.question)
        if getattr(tok, "chat_template", None):
            return tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return "\n\n".join(m["content"] for m in messages) + "\n\n"

    def _generate(self, batch: Sequence[Job]) -> list[Reply]:
        import torch

        model, tok = self._load()
        prompts = [self._prompt(tok, job) for job in batch]
        enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(self.device)
        digest = hashlib.sha256("|".join(repr(j.key.as_tuple()) + j.kind for j in batch).encode("utf-8")).hexdigest()
        sample = self.temperature > 0 and all(j.kind == "transform" for j in batch)
        kwargs = dict(max_new_tokens=self.max_new_tokens, pad_token_id=tok.pad_token_id, do_sample=sample)
        if sample:
            kwargs.update(temperature=self.temperature, top_p=0.95)
        with torch.no_grad():
            torch.manual_seed(int(digest[:8], 16))  # generate() samples from the global RNG
            out = model.generate(**enc, **kwargs)  # (B, P + T)
        new = out[:, enc["input_ids"].shape[1] :]  # (B, T)
        replies = []
        for job, ids, attn in zip(batch, new, enc["attention_mask"]):
            raw = tok.decode(ids, skip_special_tokens=True)
            n_new = int((ids != tok.pad_token_id).sum()) if tok.pad_token_id is not None else len(ids)
            text = clean_response(raw) if job.kind == "transform" else raw
            replies.append(Reply(text=text, raw=raw, prompt_tokens=int(attn.sum()), completion_tokens=n_new))
        return replies

    def run(self, jobs: Sequence[Job], on_reply: OnReply) -> None:
        jobs = list(jobs)
        for start in range(0, len(jobs), self.batch_size):
            batch = []
            for job in jobs[start : start + self.batch_size]:
                if not self.budget.take():
                    self.budget_exhausted = True
                    break
                batch.append(job)
            if batch:
                self.stats.requests += len(batch)
                for job, reply in zip(batch, self._generate(batch)):
                    self.stats.count("ok")
                    self.stats.tokens_reported = True
                    self.stats.prompt_tokens += reply.prompt_tokens or 0
                    self.stats.completion_tokens += reply.completion_tokens or 0
                    on_reply(job, reply)
            if self.budget_exhausted:
                return

    def close(self) -> None:
        self._model = self._tok = None
