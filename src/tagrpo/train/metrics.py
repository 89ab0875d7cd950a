"""What a step logs about its rollouts, and where logged metrics go (metrics.jsonl, TensorBoard,
Weights & Biases).

The rollout metrics hold the paper's diagnostic: `uniform/q0*` is the plain GRPO view (are q0's
G rewards all equal?) and `uniform/family*` the TA-GRPO view (are all (N+1)*G equal?), with
all-correct and all-wrong counted apart.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import torch

from tagrpo.train.batch import Sample


def rollout_metrics(samples: list[Sample], *, on_uniform: bool = False, gather=None) -> dict[str, float]:
    """Reward, uniform-group, advantage and length statistics of a step's samples (all
    processes' when `gather` collects a list from every rank)."""
    from tagrpo.core import nonzero_advantage_fraction, uniform_fraction

    recs = [(s.family, s.variant, s.reward, s.adv, len(s.response_ids), s.finished, bool(s.extra.get("augmented", True)))
            for s in samples]
    if gather is not None:
        recs = gather(recs)
    fam = torch.tensor([r[0] for r in recs], dtype=torch.long)  # (B,)
    var = torch.tensor([r[1] for r in recs], dtype=torch.long)  # (B,)
    rew = torch.tensor([r[2] for r in recs], dtype=torch.float32)  # (B,)
    adv = torch.tensor([r[3] for r in recs], dtype=torch.float32)  # (B,)
    lens = [r[4] for r in recs]
    m: dict[str, float] = {"reward/mean": rew.mean().item(), "reward/std": rew.std(unbiased=False).item()}
    for v in sorted(set(var.tolist())):
        sel = rew[var == v]
        m[f"reward/variant_{v}/mean"] = sel.mean().item()
        m[f"reward/variant_{v}/std"] = sel.std(unbiased=False).item()
    q0 = var == 0
    uq, uf = uniform_fraction(rew[q0], fam[q0]), uniform_fraction(rew, fam)
    for k in ("uniform", "all_correct", "all_wrong"):
        suffix = "" if k == "uniform" else f"_{k}"
        m[f"uniform/q0{suffix}"] = uq[k]
        m[f"uniform/family{suffix}"] = uf[k]
    m["adv/nonzero_frac"] = nonzero_advantage_fraction(adv)
    m["adv/abs_mean"] = adv.abs().mean().item()
    m["response/length_mean"] = sum(lens) / len(lens)
    m["response/length_max"] = float(max(lens))
    m["response/truncation_rate"] = sum(1 for r in recs if not r[5]) / len(recs)
    m["rollout/responses"] = float(len(recs))
    if on_uniform:
        fams = {r[0]: r[6] for r in recs}
        m["rollout/augmented_frac"] = sum(fams.values()) / max(1, len(fams))
    return m


def diversity_metrics(samples: list[Sample], algorithm: str) -> dict[str, float]:
    """Mean pairwise embedding distance of each family's responses ({} without the embedder)."""
    try:
        from tagrpo.eval.diversity import mean_pairwise_distance
    except ImportError:
        return {}
    by_fam: dict[int, list[str]] = {}
    for s in samples:
        if s.variant == 0 or algorithm != "grpo-matched":
            by_fam.setdefault(s.family, []).append(s.text)
    return {"diversity/mean_pairwise_distance": float(mean_pairwise_distance(list(by_fam.values())))}


class MetricsLog:
    """metrics.jsonl (one fsynced JSON line per step), plus TensorBoard / W&B when asked."""

    def __init__(self, run_dir: Path, tensorboard: bool = False, wandb_project: str | None = None, config: dict | None = None,
                 say=print):
        self.path = Path(run_dir) / "metrics.jsonl"
        self.tb = self.wandb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(str(Path(run_dir) / "tb"))
            except Exception as e:  # noqa: BLE001 - logging must not stop training
                say(f"[yellow]TensorBoard disabled: {e}[/yellow]")
        if wandb_project:
            try:
                import wandb  # type: ignore
            except ImportError:
                from tagrpo.errors import TagrpoError

                raise TagrpoError("wandb: true but the `wandb` package is not installed (pip install wandb)") from None
            self.wandb = wandb.init(project=wandb_project, config=config, dir=str(run_dir))

    def trim(self, keep_upto: int) -> None:
        """Drop lines of steps after `keep_upto` (a resumed run rewrites them) and a line cut by a kill."""
        if not self.path.exists():
            return
        kept = []
        for ln in self.path.read_text().splitlines():
            try:
                if ln.strip() and json.loads(ln).get("step", 0) <= keep_upto:
                    kept.append(ln)
            except json.JSONDecodeError:
                continue
        tmp = self.path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(x + "\n" for x in kept))
        os.replace(tmp, self.path)

    def log(self, metrics: dict) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps(metrics) + "\n")
            f.flush()
            os.fsync(f.fileno())
        step = int(metrics["step"])
        if self.tb is not None:
            for k, v in metrics.items():
                if isinstance(v, (int, float)) and k != "step" and math.isfinite(v):
                    self.tb.add_scalar(k, v, step)
            self.tb.flush()
        if self.wandb is not None:
            self.wandb.log({k: v for k, v in metrics.items() if isinstance(v, (int, float))}, step=step)

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()


def anchoring_metrics(logp: dict, anchored: list[bool], total=float) -> dict[str, float]:
    """Mean per-token log-prob of the trained rows under the prompt each is trained on (the
    update's first pass, `logp`: row -> (T,) tensor), apart for rows sampled from that prompt and
    for TA-GRPO's anchored rows (sampled for a neighbor, trained on q0); NaN where there are none.
    An anchored response's tokens were sampled for another prompt: the further its log-prob under
    q0 falls below the on-policy rows', the larger its share of the gradient. `total` sums a
    number over processes."""
    groups: dict[bool, list] = {False: [], True: []}
    for i, lp in logp.items():
        groups[anchored[i]].append(lp)
    out = {}
    for key, flag in (("train/logp_on_policy", False), ("train/logp_anchored", True)):
        rows = groups[flag]  # one sum per group: one device sync, not one per row
        s = total(float(torch.cat(rows).sum()) if rows else 0.0)
        n = total(sum(lp.numel() for lp in rows))
        out[key] = s / n if n else float("nan")
    return out


class AnchorGapWatch:
    """Warns once when TA-GRPO's anchored rows fall far off-policy under q0: the mean of
    `train/logp_on_policy - train/logp_anchored` over the last `window` steps at or above
    `threshold` nats/token. Measured in benchmarks/evidence2 (SmolLM2-135M): 0.2-0.5 for the
    base model with either neighbor source, 0.3 after training with rule neighbors, 4.8 after
    training with the generator's rewordings, whose anchored rows then had the largest gradient
    of any rows while held-out accuracy fell behind."""

    def __init__(self, threshold: float = 2.0, window: int = 8):
        self.threshold, self.window = threshold, window
        self.gaps: list[float] = []
        self.warned = False

    def update(self, metrics: dict) -> str | None:
        """Feed one step's metrics; returns the warning the first time the condition holds."""
        gap = metrics.get("train/logp_on_policy", math.nan) - metrics.get("train/logp_anchored", math.nan)
        if not math.isfinite(gap):
            return None  # no anchored rows this step (GRPO, or every neighbor row skipped)
        self.gaps = (self.gaps + [gap])[-self.window :]
        mean = sum(self.gaps) / len(self.gaps)
        if self.warned or len(self.gaps) < self.window or mean < self.threshold:
            return None
        self.warned = True
        return (f"step {int(metrics.get('step', 0))}: answers sampled for neighbors are {mean:.1f} nats/token less likely "
                f"under q0 than the policy's own answers (mean of the last {self.window} steps; train/logp_anchored). "
                "Anchored on q0, they now take a large share of each clipped gradient; closer rewordings (e.g. "
                "neighbors: rules) or grpo-matched may train better. This warning is shown once.")
