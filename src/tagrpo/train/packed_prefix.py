"""The shared-prefix forward as one plain forward, for gradient checkpointing.

`logprobs.shared_prefix_hidden` runs each distinct prompt once and hands its KV-cache rows to the
responses in a second forward. Under gradient checkpointing that cannot work (a layer recomputed
in backward would append to the cache object again), so the trainer used to turn the shared
prefix off there and run every prompt once per response: a third more tokens in a GRPO step of
4 questions x 4 answers, (N+1)G - 1 extra prompts a TA-GRPO family.

Here each distinct prompt is one row: the prompt (left padded to Pm), then its responses one
after another in blocks of T' columns (right padded). A 4D attention mask lets the prompt attend
causally to itself and each response block to the prompt and causally to its own block, never
to another block; positions restart after the prompt in every block. One forward without a
cache, so each decoder layer can be checkpointed; the same hidden states as the full
(prompt + response) rows (tested in value and gradient). The mask is dense (k, 1, L, L) with
L = Pm + S T' (S responses a row): attention costs L^2 instead of S (Pm + T')^2, so a prompt
with many long responses is spread over several rows (`blocks_per_row`, from the model's
per-layer FLOPs: SmolLM2-135M with 16 responses of 64 tokens, 8 a row; of 512 tokens, full rows
again). With a dense mask it is used only where the cache path cannot be
(`gradient_checkpointing`; DDP, whose gradient hooks expect one forward before each backward),
and only with attention kernels that take a custom mask (eager, SDPA).

`tagrpo_eager` (the training kernel of `attn_implementation: auto` on CPU) is transformers' eager
attention, plus the same layout computed block by block (`blocks_attention`): the prompt
causally over itself, then each response block over [prompt; its own block], one batched product
of (rows x blocks) instead of a dense L x L mask. No scores outside the blocks (3.5x fewer for 4
responses of 64 tokens after an 80-token prompt) and no L^2 mask, so a prompt's responses all
share one row. Values and gradients equal to the dense mask's (tested). That is the KV cache's
arithmetic in one forward, faster and leaner than the cache, so with this kernel the trainer
uses the packed forward with and without checkpointing.
"""

from __future__ import annotations

import functools
import sys

import torch

from tagrpo.rollout.batching import left_pad, round_up, unwrap_model

#: attention kernels that read a custom 4D mask (additive float for eager, boolean for SDPA)
MASKED_KERNELS = ("eager", "sdpa")
#: eager attention that also runs the packed layout block by block (`blocks_attention`)
BLOCKS_KERNEL = "tagrpo_eager"
#: the forward keyword that hands `blocks_attention` the layout, (Pm, T')
LAYOUT_KWARG = "tagrpo_blocks"


def supported(model) -> bool:
    """True when the model's current attention kernel can run the packed layout."""
    return kernel(model) in (*MASKED_KERNELS, BLOCKS_KERNEL)


def blocked(model) -> bool:
    """True when the packed layout runs block by block (no dense mask)."""
    return kernel(model) == BLOCKS_KERNEL


def blocks_per_row(counts: list[int], pm: int, tw: int, linear: float, attention: float, heads: int,
                   max_scores: int = 1 << 26, blocks: bool = False) -> int:
    """How many response blocks one row holds. A prompt's n responses take ceil(n / s) rows of
    length L = Pm + s T'; a row costs `linear` L (the layers' products, per token) plus
    `attention` times its scores: L^2 under a dense mask, Pm^2 + s T' (Pm + T') block by block
    (`blocks`). s = 1 is full (prompt + response) rows; larger s saves prompt tokens until the
    dense L^2 term wins (long responses). Also keeps one layer's scores, rows x heads x scores,
    under `max_scores` elements (eager attention holds them)."""
    best, best_cost = 1, None
    for s in range(1, max(counts) + 1):
        n_rows, width = sum(-(-c // s) for c in counts), pm + s * tw
        scores = pm * pm + s * tw * (pm + tw) if blocks else width * width
        if s > 1 and n_rows * heads * scores > max_scores:
            continue
        cost = n_rows * (linear * width + attention * scores)
        if best_cost is None or cost < best_cost:
            best, best_cost = s, cost
    return best


def costs(model) -> tuple[float, float, int]:
    """Per-layer FLOP coefficients of a decoder row (`blocks_per_row`'s linear, attention) and the
    head count, from the model's config: products 2 x (q, o: h^2; k, v: h x kv; MLP: 3 h i) a
    token, scores and weighted sum 4 h a (query, key) pair."""
    c = unwrap_model(model).config
    c = c.get_text_config() if hasattr(c, "get_text_config") else c  # composite (vision-language) configs
    h = c.hidden_size
    heads = getattr(c, "num_attention_heads", 1)
    kv = h * getattr(c, "num_key_value_heads", heads) // heads
    inter = getattr(c, "intermediate_size", 4 * h)
    return 2.0 * (2 * h * h + 2 * h * kv + 3 * h * inter), 4.0 * h, heads


def choose_per_row(model, prompts: list[list[int]], responses: list[list[int]], multiple: int = 1) -> int:
    """`blocks_per_row` for one forward: `prompts[i]` is response i's prompt."""
    counts: dict[tuple, int] = {}
    for p in prompts:
        counts[tuple(p)] = counts.get(tuple(p), 0) + 1
    pm = round_up(max(len(p) for p in counts), multiple)
    tw = round_up(max(max((len(r) for r in responses), default=1), 1), multiple)
    return blocks_per_row(list(counts.values()), pm, tw, *costs(model), blocks=blocked(model))


def layout(prompt_lens: list[int], blocks: list[list[int]], resp_lens: list[int], width_multiple_: int = 1):
    """Where everything goes. `blocks[r]` = response indices of row r, in block order.
    Returns Pm, T', L and, per response, (row, block)."""
    pm = round_up(max(prompt_lens), width_multiple_)
    tw = round_up(max(max(resp_lens, default=1), 1), width_multiple_)
    s = max(len(b) for b in blocks)
    where = {i: (k, j) for k, b in enumerate(blocks) for j, i in enumerate(b)}
    return pm, tw, pm + s * tw, where


def block_mask(valid: torch.Tensor, pm: int, tw: int) -> torch.Tensor:
    """(k, 1, L, L) boolean: query q may read key v when v is a real token, v <= q, and v is in
    the prompt or in q's own block. Every query may read itself (a padding query would otherwise
    have no key: NaN softmax rows)."""
    n = valid.shape[1]
    idx = torch.arange(n, device=valid.device)  # (L,)
    blk = torch.where(idx < pm, -1, (idx - pm) // tw)  # (L,) -1 in the prompt, else the block
    same = (blk.unsqueeze(0) == -1) | (blk.unsqueeze(0) == blk.unsqueeze(1))  # (L, L) [q, v]
    causal = idx.unsqueeze(0) <= idx.unsqueeze(1)  # (L, L) [q, v]: v <= q
    allowed = valid.unsqueeze(1) & (same & causal).unsqueeze(0)  # (k, L, L)
    allowed |= torch.eye(n, dtype=torch.bool, device=valid.device).unsqueeze(0)
    return allowed.unsqueeze(1)  # (k, 1, L, L)


def packed_inputs(prompts, responses, groups, pad_id: int, device, multiple: int = 1, per_row: int | None = None,
                  dense: bool = True) -> dict:
    """The one forward's inputs, `groups[i]` = index into `prompts` of response i, at most
    `per_row` responses a row (default: all of a prompt's): ids (k, L), attention mask (k, 1, L, L)
    boolean (`dense=False`: the prompt's real tokens, (k, 1, 1, Pm), and `layout`, the keyword of
    `blocks_attention`), positions (k, L), `keep` (the last L - Pm + 1 positions, from the prompt's
    last token on, are the ones that predict response tokens), and `rows`, `cols` (b, T) such that
    `hidden[:, -keep:][rows, cols]` predicts each response token (k: rows, b: responses)."""
    b = len(responses)
    of_prompt: list[list[int]] = [[] for _ in prompts]
    for i, g in enumerate(groups):
        of_prompt[g].append(i)
    step = per_row or max(len(m) for m in of_prompt)
    blocks = [m[j:j + step] for m in of_prompt for j in range(0, len(m), step)]  # one row each
    prompts = [prompts[g] for g, m in enumerate(of_prompt) for _ in range(0, len(m), step)]
    k = len(prompts)
    t = max(max((len(r) for r in responses), default=0), 1)
    pm, tw, n, where = layout([len(p) for p in prompts], blocks, [len(r) for r in responses], multiple)
    ids_p, att_p, pos_p = left_pad(prompts, pad_id, device, pm)  # (k, Pm) each
    ids = torch.full((k, n), pad_id, dtype=torch.long, device=device)  # (k, L)
    valid = torch.zeros((k, n), dtype=torch.bool, device=device)  # (k, L)
    pos = torch.zeros((k, n), dtype=torch.long, device=device)  # (k, L)
    ids[:, :pm], valid[:, :pm], pos[:, :pm] = ids_p, att_p.bool(), pos_p
    plen = att_p.sum(-1)  # (k,) real prompt tokens
    pos[:, pm:] = plen.unsqueeze(1) + torch.arange(tw, device=device).repeat((n - pm) // tw).unsqueeze(0)  # restart per block
    for i, r in enumerate(responses):
        kk, j = where[i]
        if r:
            ids[kk, pm + j * tw: pm + j * tw + len(r)] = torch.tensor(r, dtype=torch.long, device=device)
            valid[kk, pm + j * tw: pm + j * tw + len(r)] = True
    # token 0 of every response <- column 0 (the prompt's last token); token j > 0 of the response
    # in block s <- position Pm + s T' + j - 1, column s T' + j
    rows = torch.tensor([where[i][0] for i in range(b)], dtype=torch.long, device=device)  # (b,)
    base = torch.tensor([where[i][1] * tw for i in range(b)], dtype=torch.long, device=device)  # (b,)
    steps = torch.arange(t, device=device)  # (T,)
    cols = torch.where(steps == 0, 0, base.unsqueeze(1) + steps.unsqueeze(0))  # (b, T)
    mask = block_mask(valid, pm, tw) if dense else valid[:, None, None, :pm]
    return {"ids": ids, "mask": mask, "pos": pos, "keep": n - pm + 1, "rows": rows.unsqueeze(1).expand(b, t),
            "cols": cols, "layout": None if dense else blocks_layout(valid[:, :pm], pm, tw)}


def additive(mask: torch.Tensor) -> torch.Tensor:
    """Boolean mask -> float32 0 / most-negative, as transformers' own eager masks."""
    return torch.zeros(mask.shape, dtype=torch.float32, device=mask.device).masked_fill_(~mask, torch.finfo(torch.float32).min)


def kernel(model) -> str | None:
    """The model's attention kernel now ('eager', 'sdpa', 'flash_attention_2', ...)."""
    return getattr(unwrap_model(model).config, "_attn_implementation", None)


def blocks_layout(valid: torch.Tensor, pm: int, tw: int) -> tuple:
    """`blocks_attention`'s layout keyword for rows whose prompts' real tokens are `valid` (k, Pm):
    (Pm, T', what prompt queries may not read (k, 1, 1, Pm, Pm), what a block's queries may not
    read (k, 1, 1, 1, T', Pm + T')), built once a forward for every layer. `block_mask`'s rules:
    prompt position q reads the real prompt tokens <= q (a left-padding query with none: itself),
    a block's position j the real prompt tokens and its block's positions <= j."""
    k, dev = valid.shape[0], valid.device
    ar_p, ar_t = torch.arange(pm, device=dev), torch.arange(tw, device=dev)
    ok_p = (ar_p.unsqueeze(0) <= ar_p.unsqueeze(1)) & valid[:, None, :]  # (k, Pm, Pm) [q, v]
    ok_p |= torch.eye(pm, dtype=torch.bool, device=dev)
    ok_b = torch.cat([valid[:, None, :].expand(k, tw, pm),
                      (ar_t.unsqueeze(0) <= ar_t.unsqueeze(1)).unsqueeze(0).expand(k, tw, tw)], dim=2)  # (k, T', Pm + T')
    return pm, tw, ~ok_p[:, None, None], ~ok_b[:, None, None, None]


@functools.lru_cache(maxsize=None)
def _eager_of(modeling_module: str):
    """The eager attention of the model whose attention layer is defined in `modeling_module`
    (transformers' default for that model), else Llama's."""
    from transformers.models.llama import modeling_llama

    return getattr(sys.modules.get(modeling_module), "eager_attention_forward", modeling_llama.eager_attention_forward)


def blocks_attention(module, query, key, value, attention_mask, scaling=None, dropout: float = 0.0, **kwargs):
    """Transformers' attention-function interface (registered as BLOCKS_KERNEL). Without the
    LAYOUT_KWARG keyword: the model's eager attention. With it (`blocks_layout`): the packed
    layout of `packed_inputs(..., dense=False)`. Query, key and value (k, heads, L, d) and
    (k, kv heads, L, d); returns (k, L, heads, d), None.

    The products run in the autocast dtype when autocast is on (as eager's), the softmax in
    float32; each kv head's query heads share one product (grouped-query attention without
    repeating keys); the prompt's keys and values are copied next to each block's (a (Pm + T')
    key row per block)."""
    layout = kwargs.pop(LAYOUT_KWARG, None)
    if layout is None:
        eager = _eager_of(type(module).__module__)
        return eager(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs)
    pm, tw, not_p, not_b = layout
    k, heads, n, d = query.shape
    kvh = key.shape[1]
    rep, s = heads // kvh, (n - pm) // tw
    window = kwargs.get("sliding_window")
    if kwargs.get("softcap") is not None or kwargs.get("s_aux") is not None or (window is not None and window < n):
        raise ValueError(f"attention kernel {BLOCKS_KERNEL!r}: soft-capping, attention sinks and sliding windows shorter "
                         "than a packed row are not supported; set shared_prefix: false or attn_implementation: sdpa")
    scaling = d ** -0.5 if scaling is None else scaling
    dev = query.device.type
    dt = torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else value.dtype
    query, key, value = query.to(dt), key.to(dt), value.to(dt)

    def attend(q, kk, vv, blocked, shape):  # q (B, kvh, rep Q, d), kk / vv (B, kvh, K, d); scores viewed as `shape`
        w = torch.matmul(q, kk.transpose(2, 3)).view(shape)
        w.mul_(scaling).masked_fill_(blocked, float("-inf"))
        p = torch.softmax(w, dim=-1, dtype=torch.float32).to(dt)
        if dropout:
            p = torch.nn.functional.dropout(p, p=dropout, training=module.training)
        return torch.matmul(p.view(q.shape[0], kvh, q.shape[2], kk.shape[2]), vv)  # (B, kvh, rep Q, d)

    # the prompt over itself
    kp, vp = key[:, :, :pm], value[:, :, :pm]  # (k, kvh, Pm, d)
    out_p = attend(query[:, :, :pm].reshape(k, kvh, rep * pm, d), kp, vp, not_p, (k, kvh, rep, pm, pm))
    # each block over [prompt; itself]: rows (k S)
    qb = query[:, :, pm:].reshape(k, kvh, rep, s, tw, d).permute(0, 3, 1, 2, 4, 5).reshape(k * s, kvh, rep * tw, d)

    def with_prompt(x, xp):  # (k, kvh, L, d) -> (k S, kvh, Pm + T', d)
        xb = x[:, :, pm:].view(k, kvh, s, tw, d).transpose(1, 2)
        return torch.cat([xp.unsqueeze(1).expand(k, s, kvh, pm, d), xb], dim=3).view(k * s, kvh, pm + tw, d)

    out_b = attend(qb, with_prompt(key, kp), with_prompt(value, vp), not_b, (k, s, kvh, rep, tw, pm + tw))
    out_b = out_b.view(k, s, kvh, rep, tw, d).permute(0, 1, 4, 2, 3, 5).reshape(k, s * tw, kvh, rep, d)
    out = torch.cat([out_p.view(k, kvh, rep, pm, d).permute(0, 3, 1, 2, 4), out_b], dim=1)  # (k, L, kvh, rep, d)
    return out.view(k, n, heads, d), None


def register_kernel() -> str:
    """Register BLOCKS_KERNEL with transformers (attention and mask: eager's); returns its name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    AttentionInterface.register(BLOCKS_KERNEL, blocks_attention)
    AttentionMaskInterface.register(BLOCKS_KERNEL, ALL_MASK_ATTENTION_FUNCTIONS["eager"])
    return BLOCKS_KERNEL
