"""Response log-probs (and entropies) for the update, without ever holding (rows, T, vocab) logits.

The model runs with its output layer swapped for the identity, so its forward returns the final
hidden states (rows, T, H); the vocabulary projection, the temperature and the log-softmax then
run over chunks of tokens (`chunked_logprobs`), and the backward pass recomputes each chunk's
logits instead of keeping them. Peak memory is O(chunk x vocab) instead of O(rows x T x vocab)
(SmolLM2: 49,152 words; Qwen3: 151,936), with the same values and gradients as the plain
`log_softmax(lm_head(h) / T)` (tested).

Two forwards produce the hidden states:
- `plain`: (prompt + response) rows, prompts left-padded so every response starts at one column;
- `shared_prefix`: each distinct prompt runs once (TA-GRPO: one anchor q0 per family; GRPO: one
  per question), its KV-cache row is repeated for every response of that prompt, and gradients
  flow back through it; under gradient checkpointing the same as one forward with a block
  mask (`packed_prefix`).
Both see the prompt the caller passes: q0 for every TA-GRPO response (anchoring), q_n only for
the unanchored ablation.
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn

from tagrpo.train import packed_prefix
from tagrpo.rollout.batching import (
    cache_kwarg,
    left_pad,
    output_cache,
    right_pad,
    round_up,
    select_rows,
    unwrap_model,
    width_multiple,
)

#: float32 elements of one chunk of logits: 4M (16 MB) -> 85 tokens at a 49k vocabulary
CHUNK_ELEMENTS = 1 << 22
#: tokens of one block in the backward's (tokens x vocabulary) tiles: W's gradient is added to once a block
BLOCK_TOKENS = 4096


def autocast_ctx(device: torch.device, enabled: bool, cache: bool = True):
    """bf16 autocast for the device's type (CPU or CUDA), or nothing. `cache=False`: no weight
    cast outlives the op that made it (autocast's cache would keep a bf16 copy of every weight
    until the region ends; worth it only where a weight is used twice in one region)."""
    return torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=cache) if enabled else contextlib.nullcontext()


@contextlib.contextmanager
def hidden_states_out(model):
    """Within this block `model(...)` returns final hidden states in `.logits` (its output
    layer is the identity), and yields the real output layer. The forward still goes through
    every wrapper (DDP hooks, PEFT adapters)."""
    base = unwrap_model(model)
    head = base.get_output_embeddings()
    name = next(n for n, m in base.named_children() if m is head)
    setattr(base, name, nn.Identity())
    try:
        yield head
    finally:
        setattr(base, name, head)


class _LinearLogProbs(torch.autograd.Function):
    """log softmax((h @ W.T + b) / temperature)[target] over chunks of rows of h, and the
    entropy of the same distribution (no gradient). The backward recomputes the logits from the
    saved log-sum-exp, d logp / d logits = (onehot(target) - softmax) / temperature, in tiles of
    (up to BLOCK_TOKENS tokens) x (a slice of the vocabulary), so each tile's weight gradient goes
    to its own rows of W (no (V, H) temporary), and the one-hot part as sparse rows: for SmolLM2 at
    1,280 tokens 1.48 -> 0.62 s (0.84 -> 0.51 s in the trainer) and 80x closer to the fp32
    gradient than token chunks each adding a whole (V, H) product (benchmarks/memory/lmhead_bench.py).
    `into_grad`: the weight's gradient is added straight into `weight.grad` when that exists
    (the trainer's flat gradient buffer) and none is returned for it, instead of a (V, H) float32
    sum returned for autograd to add there (SmolLM2: 113 MB less at the backward's peak)."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, target, temperature, chunk, compute_dtype, want_entropy, into_grad=False):
        n = hidden.shape[0]  # hidden (N, H), weight (V, H), target (N,)
        logp = torch.empty(n, dtype=torch.float32, device=hidden.device)  # (N,)
        lse = torch.empty(n, dtype=torch.float32, device=hidden.device)  # (N,)
        ent = torch.empty(n if want_entropy else 0, dtype=torch.float32, device=hidden.device)  # (N,)
        with torch.autocast(hidden.device.type, enabled=False):
            w = weight.to(compute_dtype)  # (V, H)
            b = bias.to(compute_dtype) if bias is not None else None
            for s in range(0, n, chunk):
                z = _logits(hidden[s : s + chunk], w, b, compute_dtype, temperature)  # (n, V) float32
                lse_c = torch.logsumexp(z, dim=-1)  # (n,)
                lse[s : s + chunk] = lse_c
                logp[s : s + chunk] = z.gather(1, target[s : s + chunk, None]).squeeze(1) - lse_c
                if want_entropy:
                    p = torch.exp(z - lse_c[:, None])  # (n, V)
                    ent[s : s + chunk] = lse_c - (p * z).sum(-1)
        ctx.save_for_backward(hidden, weight, bias, target, lse)
        ctx.temperature, ctx.chunk, ctx.compute_dtype = temperature, chunk, compute_dtype
        ctx.into_grad = into_grad
        ctx.mark_non_differentiable(ent)
        return logp, ent

    @staticmethod
    def backward(ctx, g_logp, _g_ent):
        hidden, weight, bias, target, lse = ctx.saved_tensors
        cd, t = ctx.compute_dtype, ctx.temperature
        n, vocab = hidden.shape[0], weight.shape[0]
        direct = ctx.needs_input_grad[1] and ctx.into_grad and weight.grad is not None and weight.grad.dtype == torch.float32
        g_w = None  # (V, H) float32: weight.grad itself when `direct`
        if ctx.needs_input_grad[1]:
            g_w = weight.grad if direct else torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        g_b = torch.zeros(bias.shape, dtype=torch.float32, device=bias.device) if bias is not None and ctx.needs_input_grad[2] else None
        g_h = torch.zeros(hidden.shape, dtype=torch.float32, device=hidden.device) if ctx.needs_input_grad[0] else None  # (N, H)
        # d logp / d logits = (onehot(target) - softmax) / t. The one-hot part is sparse: a row of
        # W per token for the hidden gradient, a row of h per token added into W's gradient.
        g = g_logp.float() / t  # (N,)
        with torch.autocast(hidden.device.type, enabled=False):
            if g_h is not None:
                g_h += g[:, None] * weight[target].float()
            if g_w is not None:
                g_w.index_add_(0, target, g[:, None] * hidden.float())
            if g_b is not None:
                g_b.index_add_(0, target, g)
            # The softmax part, -g * p, over tiles of (tokens x vocabulary): every tile's logits
            # recomputed from the saved log-sum-exp, then its share of the hidden gradient (summed
            # over vocabulary tiles) and of W's gradient (the tile's own rows of W: written once a
            # token block, no (V, H) temporary). Tiles hold about as many logits as a forward chunk.
            budget = ctx.chunk * vocab  # elements of one tile
            m = width_multiple(hidden.device, cd != torch.float32)
            nb = min(n, max(ctx.chunk, BLOCK_TOKENS))  # tokens a block
            vc = max(1, budget // nb)
            vc = vc // m * m if vc >= m else vc  # vocabulary columns a tile
            for s in range(0, n, nb):
                h = hidden[s : s + nb].to(cd)  # (nb, H)
                gs = g[s : s + nb, None]  # (nb, 1)
                ls = lse[s : s + nb, None]  # (nb, 1)
                gh = g_h[s : s + nb] if g_h is not None else None
                for v in range(0, vocab, vc):
                    w = weight[v : v + vc].to(cd)  # (vc, H)
                    b = bias[v : v + vc].to(cd) if bias is not None else None
                    gz = torch.exp(_logits(h, w, b, cd, t).sub_(ls)).mul_(-gs).to(cd)  # (nb, vc) = -g * softmax
                    if gh is not None:
                        gh += gz @ w
                    if g_w is not None and cd == torch.float32:
                        g_w[v : v + vc].addmm_(gz.t(), h)  # in place
                    elif g_w is not None:
                        g_w[v : v + vc] += gz.t() @ h  # (vc, H): one tile's rows
                    if g_b is not None:
                        g_b[v : v + vc] += gz.float().sum(0)
        return (g_h.to(hidden.dtype) if g_h is not None else None,
                g_w.to(weight.dtype) if g_w is not None and not direct else None,
                g_b.to(bias.dtype) if g_b is not None else None, None, None, None, None, None, None)


def _logits(h, w, b, compute_dtype, temperature):
    z = h.to(compute_dtype) @ w.t()  # (n, V)
    if b is not None:
        z = z + b
    return z.float() / temperature


def _chunked_generic(head, hidden, target, temperature, chunk, want_entropy):
    """Any output layer (LoRA on lm_head, ...): each chunk under activation checkpointing."""
    from torch.utils.checkpoint import checkpoint

    def one(h, tgt):
        z = head(h).float() / temperature  # (n, V)
        return z.gather(1, tgt[:, None]).squeeze(1) - torch.logsumexp(z, dim=-1)

    logp, ent = [], []
    for s in range(0, hidden.shape[0], chunk):
        h, tgt = hidden[s : s + chunk], target[s : s + chunk]
        logp.append(checkpoint(one, h, tgt, use_reentrant=False))
        if want_entropy:
            with torch.no_grad():
                z = head(h).float() / temperature
                lse = torch.logsumexp(z, dim=-1)
                ent.append(lse - (torch.exp(z - lse[:, None]) * z).sum(-1))
    return torch.cat(logp), (torch.cat(ent) if want_entropy else None)


def chunked_logprobs(head, hidden, target, *, temperature: float = 1.0, autocast: bool = False,
                     want_entropy: bool = False, chunk: int = 0, into_grad: bool = False):
    """Log-probs of `target` (b, T) under log_softmax(head(hidden) / temperature), hidden (b, T, H),
    chunk x vocab logits at a time. Returns (logp (b, T) float32, entropy (b, T) or None).
    `autocast`: the projection runs in bf16 as under autocast (fp32 accumulate and softmax).
    `into_grad`: a plain Linear head adds its weight gradient straight into an existing
    `weight.grad` (see _LinearLogProbs); for one process whose gradients stay allocated."""
    b, t, hdim = hidden.shape
    flat = hidden.reshape(b * t, hdim)  # (N, H)
    tgt = target.reshape(b * t)  # (N,)
    vocab = head.weight.shape[0]
    m = width_multiple(hidden.device, autocast)
    chunk = chunk or max(16, CHUNK_ELEMENTS // vocab) // m * m
    if (b * t) % m:  # bf16 CPU: every chunk's row count a multiple of m (zero rows, dropped below)
        pad = m - (b * t) % m
        flat = torch.cat([flat, flat.new_zeros(pad, hdim)])  # (N', H)
        tgt = torch.cat([tgt, tgt.new_zeros(pad)])  # (N',)
    if type(head) is nn.Linear:
        cd = torch.bfloat16 if autocast else head.weight.dtype
        logp, ent = _LinearLogProbs.apply(flat, head.weight, head.bias, tgt, float(temperature), chunk, cd, want_entropy,
                                          into_grad)
        ent = ent if want_entropy else None
    else:
        with autocast_ctx(hidden.device, autocast):
            logp, ent = _chunked_generic(head, flat, tgt, temperature, chunk, want_entropy)
    n = b * t
    return logp[:n].reshape(b, t), (ent[:n].reshape(b, t) if ent is not None else None)


# ---------------------------------------------------------------------------------- forwards
def plain_hidden(model, prompts, responses, pad_id: int, device, autocast: bool):
    """(prompt + response) rows, prompts left-padded: hidden states predicting each response
    token (b, T, H), response ids (b, T), response mask (b, T)."""
    resp, rmask = right_pad(responses, pad_id, device)  # (b, T)
    t = resp.shape[1]
    pm = round_up(max(len(p) for p in prompts) + t, width_multiple(device, autocast)) - t  # Pm + T: bf16 CPU, a multiple of 16
    ids_p, att_p, _ = left_pad(prompts, pad_id, device, pm)  # (b, Pm) each
    ids = torch.cat([ids_p, resp], dim=1)  # (b, Pm+T)
    att = torch.cat([att_p, rmask.long()], dim=1)  # (b, Pm+T)
    pos = (att.cumsum(-1) - 1).clamp(min=0)  # (b, Pm+T)
    # each weight is used once in this forward, so autocast's cast cache saves nothing; without
    # it, under gradient checkpointing no bf16 weight copy lives past its layer (-0.27 GB for
    # SmolLM2-135M); without checkpointing autograd keeps the same casts either way
    with autocast_ctx(device, autocast, cache=False):
        out = model(input_ids=ids, attention_mask=att, position_ids=pos, logits_to_keep=t + 1, use_cache=False)
    return out.logits[:, :-1], resp, rmask  # (b, T, H)


def shared_prefix_hidden(model, prompts, responses, groups, pad_id: int, device, autocast: bool):
    """Each distinct prompt once (left padded), its KV rows gathered for every response of it
    (`groups[i]` = index into `prompts` of response i). Same outputs as `plain_hidden`."""
    m = width_multiple(device, autocast)  # bf16 CPU: both forwards' widths a multiple of 16 (batching)
    ids_p, att_p, pos_p = left_pad(prompts, pad_id, device, round_up(max(len(p) for p in prompts), m))  # (k, Pm) each
    t = max(max((len(r) for r in responses), default=0), 1)
    resp, rmask = right_pad(responses, pad_id, device, round_up(t, m))  # (b, T'), T' >= T: masked right padding
    tw = resp.shape[1]
    g = torch.tensor(groups, dtype=torch.long, device=device)  # (b,)
    att = torch.cat([att_p[g], rmask.long()], dim=1)  # (b, Pm+T')
    pos = att_p.sum(-1)[g].unsqueeze(1) + torch.arange(tw, device=device).unsqueeze(0)  # (b, T')
    with autocast_ctx(device, autocast):
        pre = model(input_ids=ids_p, attention_mask=att_p, position_ids=pos_p, use_cache=True, logits_to_keep=1)
        cache = select_rows(output_cache(pre), g)  # (k, ...) -> (b, ...): each response gets its prompt's KV rows
        out = model(input_ids=resp, attention_mask=att, position_ids=pos, use_cache=True, logits_to_keep=tw,
                    **{cache_kwarg(model): cache})
    hidden = torch.cat([pre.logits[:, -1:][g], out.logits[:, : t - 1]], dim=1)  # (b, T, H): row 0 predicts token 0
    return hidden, resp[:, :t], rmask[:, :t]


def packed_prefix_hidden(model, prompts, responses, groups, pad_id: int, device, autocast: bool):
    """`shared_prefix_hidden` as one forward without a cache (`packed_prefix`: each prompt a row,
    its responses in masked blocks after it), so that decoder layers can be checkpointed."""
    m = width_multiple(device, autocast)
    per_row = packed_prefix.choose_per_row(model, [prompts[g] for g in groups], responses, m)
    blocks = packed_prefix.blocked(model)  # block by block (tagrpo_eager), else one dense mask
    x = packed_prefix.packed_inputs(prompts, responses, groups, pad_id, device, m, per_row, dense=not blocks)
    mask = packed_prefix.additive(x["mask"]) if packed_prefix.kernel(model) == "eager" else x["mask"]
    kw = {packed_prefix.LAYOUT_KWARG: x["layout"]} if blocks else {}
    with autocast_ctx(device, autocast, cache=False):
        out = model(input_ids=x["ids"], attention_mask=mask, position_ids=x["pos"], logits_to_keep=x["keep"], use_cache=False, **kw)
    resp, rmask = right_pad(responses, pad_id, device, x["cols"].shape[1])  # (b, T) each
    return out.logits[x["rows"], x["cols"]], resp, rmask  # (b, T, H)


def response_logprobs(model, prompts, responses, *, pad_id: int, device, temperature: float = 1.0,
                      autocast: bool = False, shared_prefix: bool = False, want_entropy: bool = False,
                      chunked: bool = True, into_grad: bool = False, packed: bool = False):
    """Log-probs (b, T), response mask (b, T) and entropies (b, T) or None of `responses` after
    `prompts` (one prompt per response). With `shared_prefix`, each distinct prompt runs once.
    `chunked=False` is the plain full-logits path, for models whose logits are not just their
    output layer (soft-capping, scaling); it holds (b, T, vocab). `into_grad`: see chunked_logprobs.
    `packed`: the shared prefix as one forward with a block mask (`packed_prefix`), for gradient
    checkpointing; kernels without custom masks run full rows instead."""
    if shared_prefix and packed and not packed_prefix.supported(model):
        shared_prefix = False
    if shared_prefix:
        distinct: dict[tuple, int] = {}
        groups = [distinct.setdefault(tuple(p), len(distinct)) for p in prompts]
        uniq = [list(p) for p in distinct]

        def fwd():
            hidden_fn = packed_prefix_hidden if packed else shared_prefix_hidden
            return hidden_fn(model, uniq, responses, groups, pad_id, device, autocast)
    else:
        def fwd():
            return plain_hidden(model, prompts, responses, pad_id, device, autocast)

    if not chunked:
        from tagrpo.core import selective_log_softmax, token_entropy

        logits, resp, rmask = fwd()
        logits = logits.float() / temperature  # (b, T, V)
        ent = token_entropy(logits.detach()) if want_entropy else None
        return selective_log_softmax(logits, resp), rmask, ent
    with hidden_states_out(model) as head:
        hidden, resp, rmask = fwd()  # (b, T, H)
    logp, ent = chunked_logprobs(head, hidden, resp, temperature=temperature, autocast=autocast, want_entropy=want_entropy,
                                 into_grad=into_grad)
    return logp, rmask, ent


def head_is_plain(model) -> bool:
    """True when the model's logits are exactly its output layer applied to the hidden states
    that `hidden_states_out` returns (no soft-capping or scaling), checked on a short input."""
    dev = next(model.parameters()).device
    ids = torch.arange(1, 5, device=dev).unsqueeze(0) % unwrap_model(model).config.vocab_size  # (1, 4)
    with torch.no_grad():
        full = model(input_ids=ids, use_cache=False).logits.float()  # (1, 4, V)
        with hidden_states_out(model) as head:
            h = model(input_ids=ids, use_cache=False).logits
        return bool(torch.allclose(head(h).float(), full, atol=1e-4, rtol=1e-4))
