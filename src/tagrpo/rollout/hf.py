"""transformers `generate` engine: batches prompts (longest first, capped by `max_batch_size`
rows), left-pads, samples, and returns response ids cut after the first EOS."""

from __future__ import annotations

from tagrpo.rollout.base import Completion, SamplingParams


class HFGenerateEngine:
    def __init__(self, model, tokenizer, max_batch_size: int = 64):
        self.model = model
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        eos = getattr(model.generation_config, "eos_token_id", None) or tokenizer.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, (list, tuple)) else [eos])
        self.eos_ids.add(tokenizer.eos_token_id)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        import torch

        if params.seed is not None:
            torch.manual_seed(params.seed)
        order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
        results: list[Completion | None] = [None] * len(prompts)
        greedy = (not params.do_sample) or params.temperature == 0
        was_training = self.model.training
        self.model.eval()
        try:
            for start in range(0, len(order), self.max_batch_size):
                idx = order[start : start + self.max_batch_size]
                batch = [prompts[i] for i in idx]
                width = max(len(p) for p in batch)
                ids = torch.full((len(batch), width), self.pad_id, dtype=torch.long)  # (b, Lp)
                att = torch.zeros((len(batch), width), dtype=torch.long)  # (b, Lp)
                for r, p in enumerate(batch):
                    ids[r, width - len(p) :] = torch.tensor(p, dtype=torch.long)
                    att[r, width - len(p) :] = 1
                kwargs = dict(max_new_tokens=params.max_new_tokens, pad_token_id=self.pad_id, eos_token_id=sorted(self.eos_ids))
                if greedy:
                    kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
                else:
                    kwargs.update(do_sample=True, temperature=params.temperature, top_p=params.top_p, top_k=0)
                with torch.no_grad():
                    out = self.model.generate(input_ids=ids, attention_mask=att, **kwargs)  # (b, Lp + T)
                for r, i in enumerate(idx):
                    results[i] = self._cut(out[r, width:].tolist())
        finally:
            self.model.train(was_training)
        return results  # type: ignore[return-value]

    def _cut(self, resp: list[int]) -> Completion:
        for j, t in enumerate(resp):
            if t in self.eos_ids:
                toks = resp[: j + 1]
                return Completion(toks, self.tokenizer.decode(toks, skip_special_tokens=True), True)
        return Completion(resp, self.tokenizer.decode(resp, skip_special_tokens=True), False)
