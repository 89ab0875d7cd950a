"""How far off-policy are TA-GRPO's anchored rows? (issue 14, session 14)

For each model (a run's `final/` weights, or the base model with a run's neighbor settings), the
trainer's own rollout of `--steps` steps (its families, neighbors and sampling: `Trainer.setup`,
`families_for_step`, `train.rollout.rollout`) is scored under the prompt TA-GRPO trains it on:

- mean per-token log-prob of q0's answers under q0 (on-policy), of the neighbors' answers under
  their own prompt (on-policy for them) and under q0 (anchored: what TA-GRPO trains);
- the gradient norm of the mean per-token log-prob over each group of rows (one backward each),
  the size of the push each group would give with unit advantages.

    .venv/bin/python benchmarks/evidence2/anchor_gap.py \\
        --run base=runs/evidence2/runs/a4-ta-grpo-s0:base \\
        --run a4-final=runs/evidence2/runs/a4-ta-grpo-s0 --run a6-final=runs/evidence2/runs/a6-ta-grpo-rules-s0 \\
        --out benchmarks/evidence2/results/anchor-gap-session14.json

`--run LABEL=RUN_DIR` uses RUN_DIR/config.yaml with RUN_DIR/final; `RUN_DIR:base` the same
config with the model it started from. Weights are not in the archive: this needs the run
directories of the session that trained them.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from machine import commit, cpu_name  # benchmarks/machine.py


def token_logps(model, prompt: list[int], response: list[int]) -> torch.Tensor:
    """log pi(response | prompt) per token, (T,), from one unpadded forward (with grad)."""
    ids = torch.tensor([prompt + response])  # (1, L)
    logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()  # (T, V)
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(response).unsqueeze(-1)).squeeze(-1)


def group_stats(model, pairs: list[tuple[list[int], list[int]]]) -> dict:
    """Mean per-token log-prob over (prompt, response) pairs and the gradient norm of that mean
    (accumulated row by row: one row's activations at a time)."""
    pairs = [(p, r) for p, r in pairs if r]
    total = sum(len(r) for _, r in pairs)
    model.zero_grad(set_to_none=True)
    s = 0.0
    for p, r in pairs:
        lp = token_logps(model, p, r)  # (T,)
        (lp.sum() / total).backward()
        s += float(lp.detach().sum())
    gn = torch.sqrt(sum((q.grad.float() ** 2).sum() for q in model.parameters() if q.grad is not None))
    model.zero_grad(set_to_none=True)
    return {"rows": len(pairs), "tokens": total, "logp_per_token": s / total, "grad_norm": float(gn)}


def measure(label: str, run_dir: Path, base: bool, steps: int) -> dict:
    from tagrpo.train.config import load_config
    from tagrpo.train.rollout import rollout
    from tagrpo.train.trainer import Trainer

    cfg_doc = yaml.safe_load((run_dir / "config.yaml").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        sets = [f"output_dir={tmp}", "tensorboard=false"] + ([] if base else [f"model={run_dir / 'final'}"])
        t = Trainer(load_config(run_dir / "config.yaml", sets))
        t.setup()
        model = t.acc.unwrap_model(t.model)
        samples = []
        for step in range(steps):
            samples += rollout(t.engine, t.rewarder, step, t.families_for_step(step), t.cfg).samples
        model.train(False)
        q0 = [(s.anchor_prompt_ids, s.response_ids) for s in samples if s.variant == 0]
        nb_own = [(s.gen_prompt_ids, s.response_ids) for s in samples if s.variant > 0]
        nb_q0 = [(s.anchor_prompt_ids, s.response_ids) for s in samples if s.variant > 0]
        out = {"label": label, "run": str(run_dir), "model": cfg_doc["model"] if base else str(run_dir / "final"),
               "neighbors": cfg_doc["neighbors"], "steps": steps,
               "reward_q0": sum(s.reward for s in samples if s.variant == 0) / max(1, len(q0)),
               "reward_neighbors": sum(s.reward for s in samples if s.variant > 0) / max(1, len(nb_own)),
               "q0_under_q0": group_stats(model, q0), "neighbors_under_own": group_stats(model, nb_own),
               "neighbors_under_q0 (anchored)": group_stats(model, nb_q0)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", action="append", required=True, help="LABEL=RUN_DIR (its final/) or LABEL=RUN_DIR:base")
    ap.add_argument("--steps", type=int, default=2, help="rollout steps per model (4 families x (N+1) x G answers each)")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    torch.manual_seed(0)
    doc = {"cpu": cpu_name(), "commit": commit(), "command": " ".join(sys.argv), "when": time.strftime("%Y-%m-%d %H:%M"), "models": []}
    for spec in a.run:
        label, _, where = spec.partition("=")
        base = where.endswith(":base")
        r = measure(label, Path(where.removesuffix(":base")), base, a.steps)
        doc["models"].append(r)
        g = {k: r[k] for k in ("q0_under_q0", "neighbors_under_own", "neighbors_under_q0 (anchored)")}
        print(f"{label} ({r['neighbors']} neighbors): reward q0 {r['reward_q0']:.2f}, neighbors {r['reward_neighbors']:.2f}; "
              + "; ".join(f"{k}: logp/token {v['logp_per_token']:.3f}, grad norm {v['grad_norm']:.2f} ({v['rows']} rows)" for k, v in g.items()),
              flush=True)
        if a.out:  # after every model: a stopped run keeps what it measured
            a.out.write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
