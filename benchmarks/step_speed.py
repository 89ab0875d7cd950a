"""Time per training step for SmolLM2-135M (embedded) with grpo, grpo-matched and ta-grpo.

Each configuration runs in its own subprocess (clean peak RSS), for WARMUP + STEPS steps; we
report the median over the timed steps of: step time split into generate / reward / train,
sampled tokens/s, training tokens/s, peak RSS, and achieved training FLOP/s
(6 * params * fwd+bwd tokens + 2 * params * no-grad tokens, per second of train time) against
a 2048x2048 bf16 matmul measured in the same run. Also ta-grpo with the shared-prefix forward
off, to show what the KV-cache reuse of the anchor prompt buys.

    python benchmarks/step_speed.py --steps 3 --warmup 1 --out benchmarks/step_speed.md
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CONFIGS = {
    "grpo": ["algorithm=grpo"],
    "grpo-matched": ["algorithm=grpo-matched"],
    "ta-grpo": ["algorithm=ta-grpo"],
    "ta-grpo (shared_prefix off)": ["algorithm=ta-grpo", "shared_prefix=false"],
}
COMMON = [
    "model=smollm2-135m-instruct", "train_data=arith", "arith_difficulty=1", "neighbors=rules", "num_neighbors=3",
    "samples_per_variant=4", "questions_per_step=2", "max_new_tokens=64", "temperature=0.6", "beta=0.001",
    "lr=1e-5", "autocast=bf16", "micro_batch_tokens=2048", "generate_batch_size=64", "tensorboard=false",
    "save_final=false", "keep_checkpoints=1",
]

CHILD = r"""
import json, resource, sys, time
from tagrpo.train.config import load_config
from tagrpo.train.trainer import Trainer
cfg = load_config(None, sys.argv[2:])
t = Trainer(cfg); t.setup()
n_params = sum(p.numel() for p in t.model.parameters())
rows = []
for step in range(cfg.steps):
    m = t.train_step(step)
    rows.append(m)
json.dump({"metrics": rows, "n_params": n_params,
           "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}, open(sys.argv[1], "w"))
"""


def matmul_flops(dtype_name: str, n: int = 2048, reps: int = 10) -> float:
    import torch

    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype_name]
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    a @ b
    t0 = time.perf_counter()
    for _ in range(reps):
        a @ b
    return 2 * n**3 * reps / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3, help="timed steps per configuration")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--only", default="", help="comma-separated subset of configurations")
    ap.add_argument("--out", default="benchmarks/step_speed.md")
    args = ap.parse_args()
    names = [n for n in CONFIGS if not args.only or n in args.only.split(",")]
    results = {}
    peak = {"bf16": matmul_flops("bf16"), "fp32": matmul_flops("fp32")}
    for name in names:
        with tempfile.TemporaryDirectory() as d:
            out = Path(d) / "r.json"
            sets = COMMON + CONFIGS[name] + [f"steps={args.steps + args.warmup}", f"output_dir={d}/run"]
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", CHILD, str(out), *sets], check=True)
            res = json.loads(out.read_text())
            res["wall"] = time.perf_counter() - t0
            results[name] = res
            print(name, "done in", round(res["wall"]), "s", flush=True)
    peak_after = {"bf16": matmul_flops("bf16"), "fp32": matmul_flops("fp32")}

    def med(rows, key):
        return statistics.median(r[key] for r in rows)

    lines = [
        "# Training step speed: SmolLM2-135M-Instruct on this CPU",
        "",
        f"Command: `python benchmarks/step_speed.py --steps {args.steps} --warmup {args.warmup}`",
        "",
        "Config: " + ", ".join(f"`{c}`" for c in COMMON),
        "",
        f"bf16 2048^2 matmul: {peak['bf16'] / 1e9:.0f} GFLOP/s before, {peak_after['bf16'] / 1e9:.0f} after; "
        f"fp32: {peak['fp32'] / 1e9:.0f} / {peak_after['fp32'] / 1e9:.0f} GFLOP/s.",
        "",
        "| algorithm | responses/step | step s | generate s | reward s | train s | sampled tok/s | train tok/s | train GFLOP/s | vs bf16 matmul | peak RSS MB |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    bf16 = (peak["bf16"] + peak_after["bf16"]) / 2
    for name, res in results.items():
        rows = res["metrics"][args.warmup:]
        n = res["n_params"]
        flops = [(6 * n * r["train/computed_tokens_fwd_bwd"] + 2 * n * r["train/computed_tokens_fwd"]) / r["time/train"] for r in rows]
        gf = statistics.median(flops)
        lines.append(
            f"| {name} | {rows[0]['rollout/responses']:.0f} | {med(rows, 'time/step'):.1f} | {med(rows, 'time/generate'):.1f} | "
            f"{med(rows, 'time/reward'):.2f} | {med(rows, 'time/train'):.1f} | {med(rows, 'perf/gen_tokens_per_s'):.0f} | "
            f"{med(rows, 'perf/train_tokens_per_s'):.0f} | {gf / 1e9:.0f} | {gf / bf16:.2f} | {res['peak_rss_mb']:.0f} |"
        )
    lines += ["", "Medians over the timed steps. `train tok/s` counts prompt+response tokens of every trained sequence "
              "(the logical work); FLOP/s counts the tokens actually run through the model."]
    Path(args.out).write_text("\n".join(lines) + "\n")
    (Path(args.out).with_suffix(".json")).write_text(json.dumps({"peak": peak, "peak_after": peak_after, "results": results}, indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
