"""Turning rollouts into training tensors: group ids per algorithm, anchoring, micro-batches.

This is where the algorithms differ, and only here:
- grpo: a family is q0 with G samples; groups = families.
- grpo-matched: q0 with (N+1)*G samples; groups = families (same budget as TA-GRPO).
- ta-grpo: q0..qN with G samples each; groups = families (joint advantage); every log-prob is
  on the anchor prompt q0.
- ta-grpo-unanchored: as ta-grpo, but log-probs on the generating prompt qn.
- ta-grpo-separate: as ta-grpo, but groups = (family, variant) (per-prompt advantages).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Sample:
    """One response and everything the update needs to know about it."""

    family: int  # global family index in this step
    variant: int  # 0 = original question (for grpo-matched: the sample block index)
    gen_prompt_ids: list[int]  # prompt that generated it (q_variant)
    anchor_prompt_ids: list[int]  # q0's prompt
    response_ids: list[int]
    text: str
    finished: bool
    answer: str = ""
    reward: float = 0.0
    adv: float = 0.0
    adv_group: int = 0
    extra: dict = field(default_factory=dict)


def advantage_group_ids(samples: list[Sample], algorithm: str, num_variants: int) -> list[int]:
    """The id each sample is normalized with: its family, or (family, variant) for the
    separate ablation. On-uniform families that were not augmented hold only variant 0, so
    family == q0 group for them."""
    if algorithm == "ta-grpo-separate":
        return [s.family * num_variants + s.variant for s in samples]
    return [s.family for s in samples]


def q0_group_mask(samples: list[Sample]) -> list[bool]:
    """Samples of the q0 view: variant 0 (for grpo-matched, the first block of G)."""
    return [s.variant == 0 for s in samples]


def training_prompt(sample: Sample, algorithm: str) -> list[int]:
    """Anchoring: every log-prob is on q0, except for the unanchored ablation."""
    return sample.gen_prompt_ids if algorithm == "ta-grpo-unanchored" else sample.anchor_prompt_ids


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


def collate(prompts: list[list[int]], responses: list[list[int]], pad_id: int):
    """Left-pad prompts to Pm and right-pad responses to Tm, so every response starts at column
    Pm. Returns input_ids (b, Pm+Tm), attention_mask (b, Pm+Tm), position_ids (b, Pm+Tm),
    response_ids (b, Tm), response_mask (b, Tm)."""
    import torch

    b = len(prompts)
    pm = max(len(p) for p in prompts)
    tm = max(max(len(r) for r in responses), 1)
    ids = torch.full((b, pm + tm), pad_id, dtype=torch.long)  # (b, Pm+Tm)
    att = torch.zeros((b, pm + tm), dtype=torch.long)  # (b, Pm+Tm)
    rmask = torch.zeros((b, tm), dtype=torch.float32)  # (b, Tm)
    for i, (p, r) in enumerate(zip(prompts, responses)):
        ids[i, pm - len(p) : pm] = torch.tensor(p, dtype=torch.long)
        att[i, pm - len(p) : pm] = 1
        if r:
            ids[i, pm : pm + len(r)] = torch.tensor(r, dtype=torch.long)
            att[i, pm : pm + len(r)] = 1
            rmask[i, : len(r)] = 1.0
    pos = (att.cumsum(-1) - 1).clamp(min=0)  # (b, Pm+Tm) positions ignore left padding
    return ids, att, pos, ids[:, pm:], rmask
