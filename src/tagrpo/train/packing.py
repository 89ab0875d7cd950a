"""Micro-batches for the update: which rows run through the model together, and how many tokens
each forward computes (padding included, for FLOP/s accounting)."""

from __future__ import annotations


def pack_micro_batches(lengths: list[tuple[int, int]], token_budget: int) -> list[list[int]]:
    """Group row indices so that rows * (max prompt len + max response len) <= token_budget.

    lengths: (prompt_len, response_len) per row. Rows are sorted by total length so that padding
    is small; a row longer than the budget gets a micro-batch of its own.
    """
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i][0] + lengths[i][1], i))
    batches: list[list[int]] = []
    cur: list[int] = []
    mp = mr = 0
    for i in order:
        p, r = lengths[i]
        np_, nr = max(mp, p), max(mr, r)
        if cur and (len(cur) + 1) * (np_ + nr) > token_budget:
            batches.append(cur)
            cur, np_, nr = [], p, r
        cur.append(i)
        mp, mr = np_, nr
    if cur:
        batches.append(cur)
    return batches


def pack_shared_prefix(prompts: list[list[int]], responses: list[list[int]], idx: list[int], budget: int) -> list[list[int]]:
    """Micro-batches of row indices for the shared-prefix forward: rows ordered by prompt (for
    TA-GRPO the anchor of a whole family), as many prompts' rows per micro-batch as fit in the
    budget, counted as prompts x longest prompt + rows x longest response."""
    by_prompt: dict[tuple, list[int]] = {}
    for i in idx:
        by_prompt.setdefault(tuple(prompts[i]), []).append(i)
    out: list[list[int]] = []
    cur: list[int] = []
    n_prompts = max_p = max_t = 0
    for prompt, members in by_prompt.items():
        members.sort(key=lambda i: len(responses[i]))
        new_prompt = True
        for i in members:
            k = n_prompts + new_prompt
            p, t = max(max_p, len(prompt)), max(max_t, len(responses[i]))
            if cur and k * p + (len(cur) + 1) * t > budget:
                out.append(cur)
                cur, n_prompts, max_p, max_t, new_prompt = [], 0, 0, 0, True
                k, p, t = 1, len(prompt), len(responses[i])
            cur.append(i)
            n_prompts, max_p, max_t, new_prompt = k, p, t, False
    if cur:
        out.append(cur)
    return out


def computed_tokens(prompts: list[list[int]], responses: list[list[int]], shared_prefix: bool,
                    per_row: int | None = None) -> int:
    """Tokens one forward runs through the model, padding included (for FLOP/s accounting).
    `per_row`: the shared prefix packed (`packed_prefix`), rows of a prompt and up to `per_row`
    response blocks, each row as wide as the widest."""
    t = max(len(r) for r in responses)
    if not shared_prefix:
        return len(prompts) * (max(len(p) for p in prompts) + t)
    per_prompt: dict[tuple, int] = {}
    for p in prompts:
        per_prompt[tuple(p)] = per_prompt.get(tuple(p), 0) + 1
    pm = max(len(p) for p in per_prompt)
    if per_row:
        rows = sum(-(-n // per_row) for n in per_prompt.values())
        return rows * (pm + min(per_row, max(per_prompt.values())) * t)
    return len(per_prompt) * pm + len(responses) * t
