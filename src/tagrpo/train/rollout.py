"""Sampling and scoring a step's families: (N+1)*G responses per TA-GRPO family, G per GRPO one.

Every response row gets its own random stream, seeded by (seed, step, family, pass, sample
index), so what a family samples does not depend on which other families share its generate
call (`generate_batch_size`) or on the number of processes. With `augment: on-uniform`, q0's G
answers are sampled and scored first and the neighbors are sampled only for families whose q0
rewards are uniform. Non-finite rewards from a plug-in (NaN, inf) score 0 and are counted.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from tagrpo.train.batch import Sample, family_prompts
from tagrpo.train.config import TrainConfig
from tagrpo.train.data import seed_for


@dataclass
class Rollout:
    samples: list[Sample]
    t_generate: float = 0.0
    t_reward: float = 0.0
    nonfinite_rewards: int = 0


def sample(engine, step: int, fams: list[tuple[int, dict]], cfg: TrainConfig, variants: str = "all", pass_idx: int = 0) -> list[Sample]:
    """Generate responses for `fams` ((family, row) pairs), at most `generate_batch_size` rows
    (whole families) per engine call."""
    from tagrpo.rollout import SamplingParams

    params = SamplingParams(temperature=cfg.temperature, top_p=cfg.top_p, max_new_tokens=cfg.max_new_tokens)
    rows = dict(fams)
    out: list[Sample] = []
    chunk: list[tuple[int, int, list[int], int]] = []

    def flush():
        if not chunk:
            return
        comps = engine.generate([p for _, _, p, _ in chunk], params, seeds=[s for *_, s in chunk])
        for (f, v, p, _), c in zip(chunk, comps):
            out.append(Sample(family=f, variant=v, gen_prompt_ids=p, anchor_prompt_ids=rows[f]["prompts"][0],
                              response_ids=c.token_ids, text=c.text, finished=c.finished, answer=rows[f]["answer"]))
        chunk.clear()

    for f, row in fams:
        todo = family_prompts(f, row["prompts"], cfg.algorithm, cfg.samples_per_variant, cfg.num_neighbors, variants)
        if chunk and len(chunk) + len(todo) > cfg.generate_batch_size:
            flush()
        chunk.extend((fi, v, p, seed_for(cfg.seed, step, fi, pass_idx, j)) for j, (fi, v, p) in enumerate(todo))
    flush()
    return out


def score(rewarder, samples: list[Sample]) -> int:
    """Set each sample's reward; returns how many were non-finite (scored 0 instead)."""
    bad = 0
    for s, r in zip(samples, rewarder.score([s.text for s in samples], [s.answer for s in samples])):
        r = float(r)
        if not math.isfinite(r):
            bad, r = bad + 1, 0.0
        s.reward = r
    return bad


def rollout(engine, rewarder, step: int, fams: list[tuple[int, dict]], cfg: TrainConfig) -> Rollout:
    """Scored samples for this rank's families, ordered by (family, variant)."""
    passes = ["q0", "neighbors"] if cfg.augment == "on-uniform" and cfg.uses_neighbors else ["all"]
    res = Rollout(samples=[])
    todo = fams
    for pass_idx, variants in enumerate(passes):
        t0 = time.perf_counter()
        got = sample(engine, step, todo, cfg, variants, pass_idx)
        t1 = time.perf_counter()
        res.nonfinite_rewards += score(rewarder, got)
        res.t_generate += t1 - t0
        res.t_reward += time.perf_counter() - t1
        res.samples += got
        if variants == "q0":  # on-uniform: neighbors only for families whose q0 rewards are all equal
            uniform = {f for f, _ in fams if len({s.reward for s in got if s.family == f}) == 1}
            todo = [fr for fr in fams if fr[0] in uniform]
            for s in got:
                s.extra["augmented"] = s.family in uniform
    for s in res.samples:
        s.extra.setdefault("augmented", True)
    res.samples.sort(key=lambda s: (s.family, s.variant))
    return res
