"""A decode step for Llama-family decoders with a preallocated KV cache (the rollout engine's CPU
fast path).

transformers' forward for one new token spends a large part of a CPU decode step outside the
matmuls: its dynamic cache grows by concatenation (every layer's keys and values are copied at
every token: a third of a step at 16 rows in a profile of SmolLM2-135M), masks and position
tensors are rebuilt, and thousands of small ops run. `FastDecoder.step` runs the same arithmetic
as transformers' eager attention path, from the model's own parameters (no copy, so it always
samples from the current weights):

    x = embed(tok); for each layer: x += o(attn(rope(q(norm(x))), cache)); x += down(silu(gate) * up)
    logits = lm_head(norm(x))

with the keys and values written in place into buffers that grow in chunks of `chunk` positions,
and one additive padding mask. Prefill stays in transformers (any attention kernel, shared
prompts); its cache is copied into the buffers once.

The attention reads more positions than are filled, the ones not written yet masked and zero:
their probabilities are exactly 0. In float32 (MKL) it reads the filled width rounded up to a
multiple of `bucket` (16). In bf16 (oneDNN) it reads the whole buffer: oneDNN compiles and caches a
kernel for every distinct shape, about 0.5-1 MB of resident heap each (300 attention shapes of a
16-row SmolLM2 step: +320 MB, +154 MB with its primitive cache off), and copies a buffer's
narrower slice before every product; the whole buffer is contiguous and changes width once per
`chunk` tokens.

Covered: Llama (SmolLM2), Mistral without sliding window, Qwen2, Qwen3 (q/k norms), with GQA,
biases, tied embeddings and any rotary scaling (the model's own rotary module makes cos/sin).
`unsupported_reason(model)` says why another model keeps transformers' forward: other
architectures, PEFT/LoRA wrappers, sliding-window layers, soft-capped or scaled logits.

bf16 on CPUs with bf16 units: the step runs its products on weights packed once per `generate`
call for oneDNN (`rollout/packing.py`), q|k|v and gate|up as one product each.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tagrpo.rollout.batching import round_up, unwrap_model

ARCHITECTURES = ("llama", "mistral", "qwen2", "qwen3")
_LAYER_PARTS = ("input_layernorm", "post_attention_layernorm", "self_attn.q_proj", "self_attn.k_proj",
                "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


def _get(module, dotted: str):
    for name in dotted.split("."):
        module = getattr(module, name, None)
        if module is None:
            return None
    return module


def unsupported_reason(model) -> str | None:
    """None when `FastDecoder` runs this model exactly as transformers does, else why not."""
    if hasattr(model, "peft_config") or hasattr(unwrap_model(model), "peft_config"):
        return "a PEFT (LoRA) model"
    if unwrap_model(model) is not model:
        return "a wrapped model (DDP or similar)"
    cfg = getattr(model, "config", None)
    kind = getattr(cfg, "model_type", None)
    if kind not in ARCHITECTURES:
        return f"model_type {kind!r} (covered: {', '.join(ARCHITECTURES)})"
    if getattr(cfg, "hidden_act", "silu") != "silu":
        return f"hidden_act {cfg.hidden_act!r} (covered: silu)"
    for key in ("final_logit_softcapping", "attn_logit_softcapping", "logit_scale"):
        if getattr(cfg, key, None) not in (None, 1.0):
            return f"{key} = {getattr(cfg, key)}"
    if kind == "mistral" and getattr(cfg, "sliding_window", None):  # every layer reads it from the config
        return "sliding-window attention"
    inner, head = getattr(model, "model", None), getattr(model, "lm_head", None)
    if type(head) is not torch.nn.Linear or inner is None or _get(inner, "rotary_emb") is None:
        return "not a plain decoder with a linear lm_head and a rotary embedding"
    for layer in getattr(inner, "layers", []):
        if any(_get(layer, p) is None for p in _LAYER_PARTS):
            return f"a layer of type {type(layer).__name__} without the Llama parts"
        if getattr(layer.self_attn, "sliding_window", None):
            return "sliding-window attention"
        if any(type(_get(layer, p)) is not torch.nn.Linear for p in _LAYER_PARTS[2:]):
            return "projections that are not plain nn.Linear (quantized or adapted)"
    return None


def _rms(x, norm):
    """transformers' RMSNorm: in float32, cast back, then scaled by the weight."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
    return norm.weight * h.to(x.dtype)


def _signed_sin(sin):
    """sin with its first half negated: `_rope`'s form of transformers' rotate_half."""
    half = sin.shape[-1] // 2
    return torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)


def _rope(x, cos, signed_sin):
    """transformers' x * cos + rotate_half(x) * sin, with rotate_half(x) = (-x2, x1) written as
    roll(x) = (x2, x1) times the sign folded into sin: the same products (a sign flip is exact),
    two ops fewer per call."""
    return x * cos + torch.roll(x, x.shape[-1] // 2, dims=-1) * signed_sin


class FastDecoder:
    """Decode state of one batch: per-layer key/value buffers (b, kv_heads, capacity, head_dim),
    the additive mask (b, 1, 1, capacity) and the number of filled positions."""

    def __init__(self, model, chunk: int = 64, packed: dict | None = None, bucket: int = 16):
        reason = unsupported_reason(model)
        if reason is not None:
            raise ValueError(f"FastDecoder does not cover {reason}; use the model's own forward")
        self.model, self.chunk = model, chunk
        self.bucket = bucket  # attention reads the cache in widths rounded up to a multiple of this
        self.packed = packed or {}  # id(module) -> Packed: weights in oneDNN's layout (pack_linears)
        inner = model.model
        self.layers = list(inner.layers)
        cfg = model.config
        self.heads = cfg.num_attention_heads
        self.kv_heads = getattr(cfg, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads
        self.scaling = self.head_dim ** -0.5
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.mask = None
        self.length = 0
        self.live = None  # buffer row of each live row in the caller's order; None: all rows, in order

    # ------------------------------------------------------------------ cache
    def load(self, hf_cache, attention_mask: torch.Tensor, source_rows: torch.Tensor | None = None) -> None:
        """Take over transformers' cache after prefill; attention_mask (b, L) is 1 on real tokens.
        source_rows (b,): the cache row of each batch row (rows of one prompt share its prefill);
        None: row i is cache row i. transformers' cache is emptied layer by layer as it is copied."""
        b, length = attention_mask.shape
        rows = _pad_index(torch.arange(b, device=attention_mask.device))  # (P,) P >= b: see _padded_rows
        src = rows if source_rows is None else source_rows[rows]  # (P,) cache row of each buffer row
        cap = length + self.chunk
        self.keys, self.values = [], []
        for layer in hf_cache.layers:
            self.keys.append(_with_capacity(layer.keys[src], cap))  # (P, kvh, cap, d)
            self.values.append(_with_capacity(layer.values[src], cap))
            layer.keys = layer.values = None  # release transformers' copy now, not after the last layer
        dtype = self.keys[0].dtype
        self.mask = torch.full((len(rows), 1, 1, cap), torch.finfo(dtype).min, dtype=dtype, device=attention_mask.device)
        self.mask[:, 0, 0, :length].masked_fill_(attention_mask[rows] == 1, 0.0)  # (P, 1, 1, cap): 0 on real tokens
        self.length = length
        self.live = None

    def _grow(self) -> None:
        """`chunk` more positions in every buffer (amortized: one copy per `chunk` tokens)."""
        cap = self.keys[0].shape[2] + self.chunk
        self.keys = [_with_capacity(t[:, :, : self.length], cap) for t in self.keys]
        self.values = [_with_capacity(t[:, :, : self.length], cap) for t in self.values]
        mask = self.mask.new_full((*self.mask.shape[:-1], self.mask.shape[-1] + self.chunk), torch.finfo(self.mask.dtype).min)
        mask[..., : self.length] = self.mask[..., : self.length]
        self.mask = mask

    def select_rows(self, index: torch.Tensor) -> None:
        """Keep live rows `index` (positions in the caller's current row order), in that order.
        The buffers are compacted only when the padded row count shrinks; until then a finished
        row stays in the batch as padding (the product costs the same) instead of every layer's
        keys and values being copied."""
        live = index if self.live is None else self.live[index]
        if _padded_rows(len(index)) == self.mask.shape[0]:
            self.live = live
            return
        rows = _pad_index(live)
        self.keys = [t[rows] for t in self.keys]
        self.values = [t[rows] for t in self.values]
        self.mask = self.mask[rows]
        self.live = None

    # ------------------------------------------------------------------ step
    @torch.no_grad()
    def step(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """tokens (b,) long, positions (b,) long -> next-token logits (b, V), in the model's dtype."""
        if self.length == self.keys[0].shape[2]:
            self._grow()
        t = self.length
        m, b = tokens.shape[0], self.mask.shape[0]  # live rows, rows computed (padded)
        live = self.live if self.live is not None else (torch.arange(m, device=tokens.device) if b > m else None)
        if live is not None:  # padding rows take the first row's token and position; their results are dropped
            tokens = tokens[:1].repeat(b).index_copy_(0, live, tokens)
            positions = positions[:1].repeat(b).index_copy_(0, live, positions)
        inner = self.model.model
        x = inner.embed_tokens(tokens)  # (b, h)
        cos, sin = inner.rotary_emb(x, position_ids=positions[:, None])  # (b, 1, d) each
        cos, sin = cos[:, None], _signed_sin(sin[:, None])  # (b, 1, 1, d) each; see _rope
        self.mask[..., t] = 0.0  # the new token's position is real in every row
        w = self._width(t)  # positions the attention reads (module docstring: widths)
        mask = self.mask[..., :w]  # (b, 1, 1, w): positions t+1.. w-1 masked, their keys and values zero
        groups, nq, nk = self.heads // self.kv_heads, self.heads * self.head_dim, self.kv_heads * self.head_dim
        for i, layer in enumerate(self.layers):
            attn = layer.self_attn
            h = _rms(x, layer.input_layernorm)  # (b, h)
            qkv = self._fused(h, attn)  # (b, nq + 2 nk) when q, k, v are packed as one product, else None
            if qkv is None:
                q, k, v = self._linear(h, attn.q_proj), self._linear(h, attn.k_proj), self._linear(h, attn.v_proj)
            else:
                q, k, v = qkv[:, :nq], qkv[:, nq : nq + nk], qkv[:, nq + nk :]
            v = v.reshape(b, self.kv_heads, 1, self.head_dim)  # (b, KVH, 1, d)
            if hasattr(attn, "q_norm"):  # Qwen3: RMSNorm over the head dimension
                q = _rope(_rms(q.reshape(b, self.heads, 1, self.head_dim), attn.q_norm), cos, sin)  # (b, H, 1, d)
                k = _rope(_rms(k.reshape(b, self.kv_heads, 1, self.head_dim), attn.k_norm), cos, sin)  # (b, KVH, 1, d)
            elif qkv is not None:  # q and k side by side in one tensor: one rotation for both
                qk = _rope(qkv[:, : nq + nk].reshape(b, self.heads + self.kv_heads, 1, self.head_dim), cos, sin)
                q, k = qk[:, : self.heads], qk[:, self.heads :]  # (b, H, 1, d), (b, KVH, 1, d)
            else:
                q = _rope(q.reshape(b, self.heads, 1, self.head_dim), cos, sin)
                k = _rope(k.reshape(b, self.kv_heads, 1, self.head_dim), cos, sin)
            self.keys[i][:, :, t : t + 1] = k
            self.values[i][:, :, t : t + 1] = v
            keys = self.keys[i][:, :, :w]  # (b, KVH, w, d)
            values = self.values[i][:, :, :w]
            qg = q.reshape(b, self.kv_heads, groups, self.head_dim)  # (b, KVH, g, d): query heads of one kv head
            scores = torch.matmul(qg, keys.transpose(2, 3)) * self.scaling + mask  # (b, KVH, g, w)
            probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(qg.dtype)
            out = torch.matmul(probs, values).reshape(b, nq)  # (b, H*d)
            x = x + self._linear(out, attn.o_proj)
            h = _rms(x, layer.post_attention_layernorm)
            mlp = layer.mlp
            gu = self._fused(h, mlp)  # (b, 2 I) when gate and up are packed as one product, else None
            if gu is None:
                act = F.silu(self._linear(h, mlp.gate_proj)) * self._linear(h, mlp.up_proj)
            else:
                half = gu.shape[1] // 2
                act = F.silu(gu[:, :half]) * gu[:, half:]
            x = x + self._linear(act, mlp.down_proj)
        self.length = t + 1
        logits = self._linear(_rms(x, inner.norm), self.model.lm_head)  # (b, V)
        return logits.contiguous() if live is None else logits[live]  # (m, V) in the caller's order

    def _width(self, t: int) -> int:
        """Cache positions the attention reads at step position t. A float32 cache (MKL's
        products): t + 1 rounded up to `bucket`. Any other dtype (oneDNN): the whole buffer,
        which is contiguous, where a narrower slice of it is copied by every product of every
        layer (SmolLM2-135M, bf16, 16 rows: 30 layers of attention 226 -> 167 us each, and the
        buffer's width changes once every `chunk` tokens, so still fewer oneDNN kernels)."""
        cap = self.keys[0].shape[2]
        if self.keys[0].dtype != torch.float32:
            return cap
        return min(round_up(t + 1, self.bucket), cap)

    def _fused(self, x: torch.Tensor, module) -> torch.Tensor | None:
        """The outputs of a module's projections as one product (attention: q|k|v, MLP:
        gate|up) when pack_linears packed them together, else None."""
        p = self.packed.get(id(module))
        return None if p is None else p(x)

    def _linear(self, x: torch.Tensor, layer: torch.nn.Linear) -> torch.Tensor:
        """layer(x): on its oneDNN-packed weight when there is one (pack_linears), else `_linear`."""
        p = self.packed.get(id(layer))
        return _linear(x, layer) if p is None else p(x)  # (b, out)


def _with_capacity(kv: torch.Tensor, cap: int) -> torch.Tensor:
    """A (b, heads, cap, d) buffer whose first positions hold kv (b, heads, L, d), zeros after
    (positions not written yet are read, masked, by the attention (`_width`): they must be finite)."""
    buf = kv.new_empty((kv.shape[0], kv.shape[1], cap, kv.shape[3]))
    buf[:, :, : kv.shape[2]] = kv
    buf[:, :, kv.shape[2] :] = 0
    return buf


def _padded_rows(m: int) -> int:
    """Rows to compute for m live rows. A CPU GEMM with few rows costs about the same from 1 to
    ~24 rows (it reads the weights), but MKL is much slower at some row counts than at the next
    multiple of 16 (measured on SmolLM2's shapes: 15 rows 0.79 ms, 16 rows 0.41 ms; benchmarks/
    rollout), so the batch is padded to 4, 8 or a multiple of 16."""
    return m if m <= 2 else 4 if m <= 4 else 8 if m <= 8 else -(-m // 16) * 16


def _pad_index(index: torch.Tensor) -> torch.Tensor:
    """Row index padded to _padded_rows by repeating its first row."""
    extra = _padded_rows(len(index)) - len(index)
    return torch.cat([index, index[:1].expand(extra)]) if extra else index


def _linear(x: torch.Tensor, layer: torch.nn.Linear) -> torch.Tensor:
    """layer(x) for x (b, in) with few rows, computed as (W @ x^T)^T: on MKL CPUs the same product
    runs ~20-35% faster in this orientation at 16-64 rows (benchmarks/rollout)."""
    y = torch.mm(layer.weight, x.t()).t()  # (b, out)
    return y if layer.bias is None else y + layer.bias
