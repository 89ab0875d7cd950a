"""A transformers-model rollout engine with its own decode loop.

Batches prompts (longest first, at most `max_batch_size` rows), left-pads them, samples, and
returns response ids cut after the first EOS. It calls the model's forward directly instead of
`model.generate`, which on a CPU spends much of its time outside the model:
- sampling draws one uniform number per row and inverts the CDF (`torch.multinomial` draws one
  exponential per vocabulary entry: 49k per row per token);
- a prompt repeated in a batch (GRPO samples G answers per prompt) is prefilled once and its KV
  cache copied to the repeats (`share_prompts`);
- finished rows leave the batch, so the tail of a long answer does not drag the others;
- `dtype="bf16"` on a CPU samples from a bfloat16 copy of the weights, refreshed from the model
  at each `generate` call (the rollout/training weight split of verl and vLLM set-ups); on a GPU
  it runs the model under bf16 autocast instead (no copy), and not at all when the weights are
  already bf16. The training forward under `autocast: bf16` runs the same bf16 matmuls.
  `release_copy()` frees the copy's weights until the next call (the trainer's lean CPU memory);
- on a CPU, Llama-family models (Llama/SmolLM2, Mistral without sliding window, Qwen2, Qwen3)
  decode through `rollout/decode.py` after transformers' prefill: a preallocated KV cache instead
  of transformers' concatenating one, and the step's products in the orientation MKL runs fastest
  with few rows (`fast_decode`: None = that default, True/False to force; the same tokens as
  transformers' forward in the tests, and in benchmarks/rollout on the real model); with bf16
  weights on a CPU with bf16 units those products run on weights packed for oneDNN once per
  call (`prepack`, default True; bit-identical products);
- every tensor lives on the model's device;
- `seeds` (one per prompt) gives each row its own random stream, so a row's sample does not
  depend on which other rows share its batch (the trainer seeds per family and sample, making
  rollouts independent of `generate_batch_size` and of the process count).
Same distribution as `model.generate(do_sample=True, temperature, top_p, top_k=0)`; greedy
decoding gives the same tokens (tested).
"""

from __future__ import annotations

import contextlib
import copy
import functools

import torch

from tagrpo.rollout.base import Completion, SamplingParams
from tagrpo.rollout.batching import (
    cache_kwarg,
    left_pad,
    model_device,
    output_cache,
    round_up,
    select_rows,
    width_multiple,
)
from tagrpo.rollout.decode import FastDecoder, unsupported_reason
from tagrpo.rollout.packing import pack_linears, packed_modules

DTYPES = ("fp32", "bf16")
__all__ = ["DTYPES", "HFGenerateEngine", "cache_kwarg", "sample_tokens"]


def sample_tokens(logits, temperature: float, top_p: float, generator=None, u=None):
    """One token per row of `logits` (b, V): greedy when temperature is 0, else softmax(logits / T)
    restricted to the top-p nucleus, by inverting the CDF at one uniform draw per row (`u`, (b, 1)
    in [0, 1); drawn from `generator` or the global RNG when not given)."""
    if temperature == 0:
        return logits.argmax(-1)  # (b,)
    probs = torch.softmax(logits.float() / temperature, dim=-1)  # (b, V)
    if u is None:
        u = torch.rand(probs.shape[0], 1, generator=generator, device=probs.device if generator is None else "cpu")
    u = u.to(probs.device)  # (b, 1)
    if top_p < 1.0:
        sp, si = probs.sort(dim=-1, descending=True)  # (b, V) each
        # keep the smallest prefix whose mass reaches top_p (the top token always stays)
        drop = (sp.cumsum(-1) - sp) >= top_p  # (b, V)
        sp = sp.masked_fill(drop, 0.0)
        cdf = sp.cumsum(-1)  # (b, V)
        j = torch.searchsorted(cdf, u * cdf[:, -1:], right=True).clamp(max=probs.shape[1] - 1)  # (b, 1)
        return si.gather(1, j).squeeze(1)
    cdf = probs.cumsum(-1)  # (b, V)
    j = torch.searchsorted(cdf, u * cdf[:, -1:], right=True).clamp(max=probs.shape[1] - 1)  # (b, 1)
    return j.squeeze(1)


class HFGenerateEngine:
    def __init__(self, model, tokenizer, max_batch_size: int = 64, share_prompts: bool = True, dtype: str = "fp32",
                 fast_decode: bool | None = None, prepack: bool = True, lean: bool = False):
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        self.model = model
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.share_prompts = share_prompts
        self.dtype = dtype
        self.fast_decode = fast_decode  # None: on a CPU, for the architectures rollout/decode.py covers
        self.prepack = prepack  # the fast decoder's bf16 weights packed for oneDNN once per call (packing.pack_linears)
        self._packed: dict = {}
        # lean: the bf16 copy's projection weights are freed once the call's last batch is
        # prefilled (its decode steps read only their packed form; `_after_prefill`) and cast
        # again at the next call
        self.lean = lean
        eos = getattr(model.generation_config, "eos_token_id", None) or tokenizer.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, (list, tuple)) else [eos])
        self.eos_ids.add(tokenizer.eos_token_id)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.prefill_rows_saved = 0  # prompt rows not prefilled thanks to share_prompts
        self._copy = None
        self._copy_released = False

    @property
    def device(self) -> torch.device:
        return model_device(self.model)

    # ------------------------------------------------------------------ weights
    def _rollout_model(self):
        """The model to sample from: the model itself, or (bf16 on a CPU) its bf16 copy refreshed now."""
        if self.dtype == "fp32" or self.device.type != "cpu":
            return self.model
        if self._copy is None:
            self._copy = copy.deepcopy(self.model)
            for p in self._copy.parameters():  # parameters only: rotary buffers stay float32
                p.requires_grad_(False)
                p.data = p.data.to(torch.bfloat16)
        with torch.no_grad():
            for dst, src in zip(self._copy.parameters(), self.model.parameters()):
                if self._copy_released:  # release_copy: allocate them again
                    dst.data = src.detach().to(torch.bfloat16)
                else:
                    dst.copy_(src)
        self._copy_released = False
        self._copy.eval()
        return self._copy

    def release_copy(self) -> None:
        """Free the bf16 copy's weights until the next generate (which casts them again): the
        trainer's update then runs without them (lean CPU memory). The module stays, so no deep
        copy is made again."""
        if self._copy is not None:
            self._free_copy_weights(self._copy.parameters())

    def _free_copy_weights(self, params) -> None:
        """Empty these parameters of the bf16 copy; the next `_rollout_model` casts every weight again."""
        for p in params:
            p.data = torch.empty(0, dtype=p.dtype)
        self._copy_released = True

    def _after_prefill(self, model, pack: bool, last: bool, rows: int) -> None:
        """Between a batch's prefill and its decode steps: pack the decode weights for oneDNN after
        the call's first prefill (`pack`: {} unless bf16 on a CPU with bf16 units); with `lean`,
        once the call's last batch is prefilled, its bf16 copy's weights that have a packed form
        are freed (when the first batch is also the last, each one as soon as it is packed, so
        the copy and the packed form never both exist whole: SmolLM2-135M, ~210 MB less at the
        rollout's peak)."""
        free = last and self.lean and model is self._copy  # only the engine's own copy, never the caller's model
        if pack and not self._packed:
            release = (lambda m: self._free_packed_weights(model, [m])) if free else None
            self._packed = pack_linears(model, rows=rows, release=release)
        elif free and self._packed:
            self._free_packed_weights(model, packed_modules(self._packed))

    def _free_packed_weights(self, model, modules) -> None:
        """Free the bf16 copy's weights of these packed modules (projections; the lm_head unless it
        is the embedding), so the decode steps hold one bf16 form of them instead of two
        (SmolLM2-135M: 212 of 270 MB); the next call casts them again."""
        embed = model.get_input_embeddings().weight
        self._free_copy_weights(m.weight for m in modules if m.weight is not embed)

    def _autocast(self):
        """bf16 autocast on accelerators when asked for and the weights are not bf16 already."""
        dev = self.device
        if self.dtype == "bf16" and dev.type != "cpu" and next(self.model.parameters()).dtype != torch.bfloat16:
            return torch.autocast(dev.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    # ------------------------------------------------------------------ generation
    def generate(self, prompts: list[list[int]], params: SamplingParams, seeds: list[int] | None = None) -> list[Completion]:
        """One completion per prompt, in order. `seeds` (one per prompt): each row samples from
        its own generator seeded with it, whatever the batch; otherwise `params.seed` seeds the
        global RNG once for the call."""
        if seeds is not None and len(seeds) != len(prompts):
            raise ValueError(f"seeds has {len(seeds)} entries for {len(prompts)} prompts; give one per prompt")
        if params.seed is not None and seeds is None:
            torch.manual_seed(params.seed)
        order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
        results: list[Completion | None] = [None] * len(prompts)
        temperature = 0.0 if (not params.do_sample) or params.temperature == 0 else params.temperature
        was_training = self.model.training
        self.model.eval()
        try:
            model = self._rollout_model()
            pack = self.prepack and self._fast_applies(model)
            self._packed = {}
            for start in range(0, len(order), self.max_batch_size):
                idx = order[start : start + self.max_batch_size]
                gens = None
                if seeds is not None:
                    gens = [torch.Generator().manual_seed(int(seeds[i])) for i in idx]
                last = start + self.max_batch_size >= len(order)
                with torch.no_grad(), self._autocast():
                    outs = self._decode(model, [prompts[i] for i in idx], temperature, params.top_p, params.max_new_tokens, gens,
                                        after_prefill=functools.partial(self._after_prefill, pack=pack, last=last,
                                                                        rows=min(16, len(prompts))))
                for i, toks in zip(idx, outs):
                    results[i] = self._cut(toks)
        finally:
            self._packed = {}  # the weights change before the next call
            self.model.train(was_training)
        return results  # type: ignore[return-value]

    def _decode(self, model, batch: list[list[int]], temperature: float, top_p: float, max_new: int,
                gens: list | None = None, after_prefill=None) -> list[list[int]]:
        kw = cache_kwarg(model)
        dev = self.device
        b = len(batch)
        bf16 = next(model.parameters()).dtype == torch.bfloat16
        width = round_up(max(len(p) for p in batch), width_multiple(dev, bf16))  # bf16 CPU: a multiple of 16 (batching)
        slot: dict[tuple[int, ...], int] = {}
        inv = [slot.setdefault(tuple(p), len(slot)) for p in batch]
        # the last position's logits only, kept by index: transformers' int `logits_to_keep=1`
        # slices the hidden states to a non-contiguous (b, 1, H) view, which torch's CPU matmul
        # runs as a batched product on b copies of the (V, H) lm_head weight (SmolLM2-135M, bf16,
        # 8 prompts: +437 MB and ~300 ms a prefill; by index: 5 MB, 6 ms, the same logits)
        last_pos = torch.tensor([width - 1], device=dev)  # (1,)
        if self.share_prompts and len(slot) < b:
            # prefill each distinct prompt once; its rows share that KV cache (gathered straight
            # into the fast decoder's buffers, or repeated in transformers' cache) and its logits
            ids_u, att_u, pos_u = left_pad([list(p) for p in slot], self.pad_id, dev, width)  # (u, Lp) each
            out = model(input_ids=ids_u, attention_mask=att_u, position_ids=pos_u, use_cache=True, logits_to_keep=last_pos)
            sel = torch.tensor(inv, dtype=torch.long, device=dev)  # (b,) distinct prompt of each row
            ids, att, pos = ids_u[sel], att_u[sel], pos_u[sel]  # (b, Lp) each
            logits = out.logits[:, -1][sel]  # (b, V)
            self.prefill_rows_saved += b - len(slot)
        else:
            ids, att, pos = left_pad(batch, self.pad_id, dev, width)  # (b, Lp) each
            out = model(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=True, logits_to_keep=last_pos)
            sel, logits = None, out.logits[:, -1]  # (b, V)
        cache = output_cache(out)
        del out
        if after_prefill is not None:
            after_prefill(model)
        fast = self._fast_decoder(model)  # after the hook: it may pack the weights the decoder reads
        if fast is not None:
            fast.load(cache, att, source_rows=sel)
            cache = None  # the fast decoder holds its own copy
        elif sel is not None:
            select_rows(cache, sel)
        next_pos = pos[:, -1:] + 1  # (b, 1)
        eos = torch.tensor(sorted(self.eos_ids), dtype=torch.long, device=dev)
        rows = list(range(b))  # batch row -> original index, for the rows still decoding
        tokens: list[list[int]] = [[] for _ in range(b)]
        for t in range(max_new):
            u = None
            if gens is not None and temperature > 0:
                u = torch.stack([torch.rand(1, generator=gens[r]) for r in rows])  # (b_active, 1), one stream per row
            tok = sample_tokens(logits, temperature, top_p, u=u)  # (b_active,)
            for r, v in zip(rows, tok.tolist()):
                tokens[r].append(v)
            if t == max_new - 1:
                break
            alive = ~torch.isin(tok, eos)  # (b_active,)
            if not bool(alive.all()):
                if not bool(alive.any()):
                    break
                keep = alive.nonzero().squeeze(1)  # (b_alive,)
                if fast is not None:
                    fast.select_rows(keep)
                else:
                    select_rows(cache, keep)
                att, next_pos, tok = att[keep], next_pos[keep], tok[keep]
                rows = [rows[i] for i in keep.tolist()]
            if fast is not None:
                logits = fast.step(tok, next_pos[:, 0])  # (b_alive, V)
            else:
                att = torch.cat([att, torch.ones((att.shape[0], 1), dtype=att.dtype, device=dev)], dim=1)  # (b_alive, L + 1)
                out = model(input_ids=tok[:, None], attention_mask=att, position_ids=next_pos, use_cache=True,
                            logits_to_keep=1, **{kw: cache})
                cache = output_cache(out)
                logits = out.logits[:, -1]
            next_pos = next_pos + 1
        return tokens

    def _fast_applies(self, model) -> bool:
        """Whether the preallocated-cache decode step (rollout/decode.py) applies: `fast_decode`
        True, or None (auto) on a CPU; only for the architectures it covers."""
        if self.fast_decode is False or (self.fast_decode is None and self.device.type != "cpu"):
            return False
        return unsupported_reason(model) is None

    def _fast_decoder(self, model) -> FastDecoder | None:
        return FastDecoder(model, packed=self._packed) if self._fast_applies(model) else None

    def _cut(self, resp: list[int]) -> Completion:
        for j, t in enumerate(resp):
            if t in self.eos_ids:
                toks = resp[: j + 1]
                return Completion(toks, self.tokenizer.decode(toks, skip_special_tokens=True), True)
        return Completion(resp, self.tokenizer.decode(resp, skip_special_tokens=True), False)
