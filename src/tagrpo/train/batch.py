"""Where the algorithms differ, and only here: which prompts are sampled, how responses are
grouped for the advantage, and which prompt their log-probs are computed on.

- grpo: a family is q0 with G samples; groups = families.
- grpo-matched: q0 with (N+1)*G samples; groups = families (same budget as TA-GRPO).
- ta-grpo: q0..qN with G samples each; groups = families (joint advantage); every log-prob is
  on the anchor prompt q0.
- ta-grpo-unanchored: as ta-grpo, but log-probs on the generating prompt qn.
- ta-grpo-separate: as ta-grpo, but groups = (family, variant) (per-prompt advantages).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class Sample:
    """One response and everything the update needs to know about it."""

    family: int  # family index in this step
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


def family_prompts(fam: int, prompts: list[list[int]], algorithm: str, g: int, num_neighbors: int,
                   variants: str = "all") -> list[tuple[int, int, list[int]]]:
    """(family, variant, prompt ids) per response to sample. `prompts` = [q0, q1..qN] ids;
    variants: 'all', 'q0' or 'neighbors' (the two passes of `augment: on-uniform`)."""
    anchor = prompts[0]
    if algorithm == "grpo":
        return [(fam, 0, anchor)] * g
    if algorithm == "grpo-matched":
        return [(fam, j // g, anchor) for j in range((num_neighbors + 1) * g)]
    chosen = {"all": range(len(prompts)), "q0": [0], "neighbors": range(1, len(prompts))}[variants]
    return [(fam, v, prompts[v]) for v in chosen for _ in range(g)]


def advantage_group_ids(samples: list[Sample], algorithm: str, num_variants: int) -> list[int]:
    """The id each sample is normalized with: its family, or (family, variant) for the
    separate ablation. On-uniform families that were not augmented hold only variant 0, so
    family == q0 group for them."""
    if algorithm == "ta-grpo-separate":
        return [s.family * num_variants + s.variant for s in samples]
    return [s.family for s in samples]


def assign_advantages(samples: list[Sample], algorithm: str, num_variants: int, scale: str = "group", eps: float = 1e-6) -> None:
    """group_advantages over the algorithm's group ids; sets `adv` and `adv_group` on each sample."""
    from tagrpo.core import group_advantages

    gids = advantage_group_ids(samples, algorithm, num_variants)
    rewards = torch.tensor([s.reward for s in samples], dtype=torch.float32)  # (B,)
    adv = group_advantages(rewards, torch.tensor(gids, dtype=torch.long), scale=scale, eps=eps)  # (B,)
    for s, a, g in zip(samples, adv.tolist(), gids):
        s.adv, s.adv_group = a, g


def training_prompt(sample: Sample, algorithm: str) -> list[int]:
    """Anchoring: every log-prob is on q0, except for the unanchored ablation."""
    return sample.gen_prompt_ids if algorithm == "ta-grpo-unanchored" else sample.anchor_prompt_ids


def training_rows(samples: list[Sample], algorithm: str, filter_uniform: bool = False) -> list[Sample]:
    """The samples the update trains on: all with a response, minus uniform groups under
    `filter_uniform` (DAPO-style dynamic sampling)."""
    keep = samples
    if filter_uniform:
        by_group: dict[int, set] = {}
        for s in samples:
            by_group.setdefault(s.adv_group, set()).add(s.reward)
        keep = [s for s in samples if len(by_group[s.adv_group]) > 1]
    return [s for s in keep if s.response_ids]
