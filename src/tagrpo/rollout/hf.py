"""A transformers-model rollout engine with its own decode loop.

Batches prompts (longest first, at most `max_batch_size` rows), left-pads them, samples, and
returns response ids cut after the first EOS. It calls the model's forward directly instead of
`model.generate`, which on a CPU spends much of its time outside the model:
- sampling draws one uniform number per row and inverts the CDF (`torch.multinomial` draws one
  exponential per vocabulary entry: 49k per row per token);
- a prompt repeated in a batch (GRPO samples G answers per prompt) is prefilled once and its KV
  cache copied to the repeats (`share_prompts`);
- finished rows leave the batch, so the tail of a long answer does not drag the others;
- `dtype="bf16"` samples from a bfloat16 copy of the weights, refreshed from the model at each
  `generate` call (the rollout/training weight split of verl and vLLM set-ups). The training
  forward under `autocast: bf16` runs the same bf16 matmuls.
Same distribution as `model.generate(do_sample=True, temperature, top_p, top_k=0)`; greedy
decoding gives the same tokens (tested).
"""

from __future__ import annotations

import copy
import inspect

from tagrpo.rollout.base import Completion, SamplingParams

DTYPES = ("fp32", "bf16")


def cache_kwarg(model) -> str:
    """Name of a model's KV-cache argument: 'cache' in recent transformers, 'past_key_values' before."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(type(base).forward).parameters else "past_key_values"


def sample_tokens(logits, temperature: float, top_p: float, generator=None):
    """One token per row of `logits` (b, V): greedy when temperature is 0, else softmax(logits / T)
    restricted to the top-p nucleus, by inverting the CDF at one uniform draw per row."""
    import torch

    if temperature == 0:
        return logits.argmax(-1)  # (b,)
    probs = torch.softmax(logits.float() / temperature, dim=-1)  # (b, V)
    if top_p < 1.0:
        sp, si = probs.sort(dim=-1, descending=True)  # (b, V) each
        # keep the smallest prefix whose mass reaches top_p (the top token always stays)
        drop = (sp.cumsum(-1) - sp) >= top_p  # (b, V)
        sp = sp.masked_fill(drop, 0.0)
        cdf = sp.cumsum(-1)  # (b, V)
        u = torch.rand(probs.shape[0], 1, generator=generator) * cdf[:, -1:]  # (b, 1)
        j = torch.searchsorted(cdf, u, right=True).clamp(max=probs.shape[1] - 1)  # (b, 1)
        return si.gather(1, j).squeeze(1)
    cdf = probs.cumsum(-1)  # (b, V)
    u = torch.rand(probs.shape[0], 1, generator=generator) * cdf[:, -1:]  # (b, 1)
    j = torch.searchsorted(cdf, u, right=True).clamp(max=probs.shape[1] - 1)  # (b, 1)
    return j.squeeze(1)


class HFGenerateEngine:
    def __init__(self, model, tokenizer, max_batch_size: int = 64, share_prompts: bool = True, dtype: str = "fp32"):
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        self.model = model
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.share_prompts = share_prompts
        self.dtype = dtype
        eos = getattr(model.generation_config, "eos_token_id", None) or tokenizer.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, (list, tuple)) else [eos])
        self.eos_ids.add(tokenizer.eos_token_id)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.prefill_rows_saved = 0  # prompt rows not prefilled thanks to share_prompts
        self._copy = None

    # ------------------------------------------------------------------ weights
    def _rollout_model(self):
        """The model to sample from: the model itself (fp32), or its bf16 copy refreshed now."""
        import torch

        if self.dtype == "fp32":
            return self.model
        if self._copy is None:
            self._copy = copy.deepcopy(self.model)
            for p in self._copy.parameters():  # parameters only: rotary buffers stay float32
                p.requires_grad_(False)
                p.data = p.data.to(torch.bfloat16)
        with torch.no_grad():
            for dst, src in zip(self._copy.parameters(), self.model.parameters()):
                dst.copy_(src)
        self._copy.eval()
        return self._copy

    # ------------------------------------------------------------------ generation
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        import torch

        if params.seed is not None:
            torch.manual_seed(params.seed)
        order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
        results: list[Completion | None] = [None] * len(prompts)
        temperature = 0.0 if (not params.do_sample) or params.temperature == 0 else params.temperature
        was_training = self.model.training
        self.model.eval()
        try:
            model = self._rollout_model()
            for start in range(0, len(order), self.max_batch_size):
                idx = order[start : start + self.max_batch_size]
                with torch.no_grad():
                    outs = self._decode(model, [prompts[i] for i in idx], temperature, params.top_p, params.max_new_tokens)
                for i, toks in zip(idx, outs):
                    results[i] = self._cut(toks)
        finally:
            self.model.train(was_training)
        return results  # type: ignore[return-value]

    def _left_pad(self, batch: list[list[int]], width: int):
        import torch

        ids = torch.full((len(batch), width), self.pad_id, dtype=torch.long)  # (b, Lp)
        att = torch.zeros((len(batch), width), dtype=torch.long)  # (b, Lp)
        for r, p in enumerate(batch):
            ids[r, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            att[r, width - len(p) :] = 1
        return ids, att

    def _decode(self, model, batch: list[list[int]], temperature: float, top_p: float, max_new: int) -> list[list[int]]:
        import torch

        kw = cache_kwarg(model)
        b = len(batch)
        width = max(len(p) for p in batch)
        slot: dict[tuple[int, ...], int] = {}
        inv = [slot.setdefault(tuple(p), len(slot)) for p in batch]
        if self.share_prompts and len(slot) < b and width > 1:
            # prefill all but the last prompt position once per distinct prompt, copy the cache
            ids_u, att_u = self._left_pad([list(p) for p in slot], width)  # (u, Lp) each
            pos_u = (att_u.cumsum(-1) - 1).clamp(min=0)  # (u, Lp)
            pre = model(input_ids=ids_u[:, :-1], attention_mask=att_u[:, :-1], position_ids=pos_u[:, :-1],
                        use_cache=True, logits_to_keep=1)
            cache = getattr(pre, "cache", None) or pre.past_key_values
            sel = torch.tensor(inv, dtype=torch.long)  # (b,)
            cache.batch_select_indices(sel)
            att = att_u[sel]  # (b, Lp)
            pos = pos_u[sel]
            ids = ids_u[sel]
            out = model(input_ids=ids[:, -1:], attention_mask=att, position_ids=pos[:, -1:], use_cache=True,
                        logits_to_keep=1, **{kw: cache})
            self.prefill_rows_saved += b - len(slot)
        else:
            ids, att = self._left_pad(batch, width)  # (b, Lp) each
            pos = (att.cumsum(-1) - 1).clamp(min=0)  # (b, Lp)
            out = model(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=True, logits_to_keep=1)
        cache = getattr(out, "cache", None) or out.past_key_values
        next_pos = pos[:, -1:] + 1  # (b, 1)
        eos = torch.tensor(sorted(self.eos_ids), dtype=torch.long)
        rows = list(range(b))  # batch row -> original index, for the rows still decoding
        tokens: list[list[int]] = [[] for _ in range(b)]
        logits = out.logits[:, -1]  # (b, V)
        for t in range(max_new):
            tok = sample_tokens(logits, temperature, top_p)  # (b_active,)
            for r, v in zip(rows, tok.tolist()):
                tokens[r].append(v)
            if t == max_new - 1:
                break
            alive = ~torch.isin(tok, eos)  # (b_active,)
            if not bool(alive.all()):
                if not bool(alive.any()):
                    break
                keep = alive.nonzero().squeeze(1)  # (b_alive,)
                cache.batch_select_indices(keep)
                att, next_pos, tok = att[keep], next_pos[keep], tok[keep]
                rows = [rows[i] for i in keep.tolist()]
            att = torch.cat([att, torch.ones((att.shape[0], 1), dtype=att.dtype)], dim=1)  # (b_alive, L + 1)
            out = model(input_ids=tok[:, None], attention_mask=att, position_ids=next_pos, use_cache=True,
                        logits_to_keep=1, **{kw: cache})
            cache = getattr(out, "cache", None) or out.past_key_values
            next_pos = next_pos + 1
            logits = out.logits[:, -1]
        return tokens

    def _cut(self, resp: list[int]) -> Completion:
        for j, t in enumerate(resp):
            if t in self.eos_ids:
                toks = resp[: j + 1]
                return Completion(toks, self.tokenizer.decode(toks, skip_special_tokens=True), True)
        return Completion(resp, self.tokenizer.decode(resp, skip_special_tokens=True), False)
