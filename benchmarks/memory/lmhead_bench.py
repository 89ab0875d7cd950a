"""The chunked lm-head log-probs (train/logprobs.py) of this tree against another commit's, side by
side in one process: forward and backward seconds, and each gradient's error against the fp32
computation, on SmolLM2-135M's shapes (H 576, V 49,152), bf16 autocast, the gradient added into an
existing weight.grad as the trainer does (`into_grad`).

    .venv/bin/python benchmarks/memory/lmhead_bench.py --baseline-rev 97946e2 --tokens 1280
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

from tagrpo.train import logprobs as this_tree


def load_rev(rev: str):
    src = subprocess.run(["git", "show", f"{rev}:src/tagrpo/train/logprobs.py"], check=True, capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / f"logprobs_{rev}.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run(mod, head, hidden, target, g, autocast: bool):
    head.weight.grad = torch.zeros_like(head.weight)
    hidden.grad = None
    t0 = time.perf_counter()
    logp, _ = mod.chunked_logprobs(head, hidden, target, temperature=0.6, autocast=autocast, into_grad=True)
    t1 = time.perf_counter()
    (logp * g).sum().backward()
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1, head.weight.grad.clone(), hidden.grad.clone()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline-rev", required=True, help="git revision whose train/logprobs.py is the baseline")
    ap.add_argument("--tokens", type=int, default=1280)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    torch.manual_seed(0)
    h, v = 576, 49152
    head = nn.Linear(h, v, bias=False)
    hidden = torch.randn(1, args.tokens, h, requires_grad=True)
    target = torch.randint(0, v, (1, args.tokens))
    g = torch.randn(1, args.tokens)
    mods = {args.baseline_rev: load_rev(args.baseline_rev), "this tree": this_tree}
    _, _, *ref = run(this_tree, head, hidden, target, g, autocast=False)  # fp32 products
    times = {k: [] for k in mods}
    errs = {}
    for _ in range(args.reps):  # alternating, so a drift of the machine hits both
        for name, mod in mods.items():
            f, b, gw, gh = run(mod, head, hidden, target, g, autocast=True)
            times[name].append((f, b))
            errs[name] = [float((a - r).norm() / r.norm()) for a, r in zip((gw, gh), ref)]
    print(f"{args.tokens} tokens, H {h}, V {v}, bf16 autocast, torch {torch.__version__}, {torch.get_num_threads()} threads")
    print("| tree | forward s (median) | backward s (median) | weight grad rel. error vs fp32 | hidden grad rel. error |")
    print("|---|---|---|---|---|")
    for name in mods:
        fs, bs = sorted(t[0] for t in times[name]), sorted(t[1] for t in times[name])
        print(f"| {name} | {fs[len(fs) // 2]:.3f} | {bs[len(bs) // 2]:.3f} | {errs[name][0]:.2e} | {errs[name][1]:.2e} |")


if __name__ == "__main__":
    sys.exit(main())
