"""Seconds per optimizer step on SmolLM2-135M-shaped parameters (random, no model needed):
torch's fused AdamW (fp32 moments) against tagrpo's AdamWBF16State, optionally an older copy of
it (`--old FILE`, e.g. `git show REV:src/tagrpo/train/optim.py > /tmp/optim_old.py`) and other
chunk sizes. Interleaved rounds; medians.

    .venv/bin/python benchmarks/memory/optim_speed.py --old /tmp/optim_old.py --rounds 3

The fused kernel is built (torch.compile) in its first round's untimed step; that build's time
is printed apart.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import time

import torch

from tagrpo.train.optim import AdamWBF16State

# SmolLM2-135M: tied 49,152 x 576 embedding, 30 layers (q, k, v, o, gate, up, down, two norms)
SHAPES = [(49152, 576)] + [(576, 576), (192, 576), (192, 576), (576, 576), (1536, 576), (1536, 576), (576, 1536),
                           (576,), (576,)] * 30


def params() -> list[torch.nn.Parameter]:
    torch.manual_seed(0)
    ps = [torch.nn.Parameter(torch.randn(*s) * 0.02) for s in SHAPES]
    for p in ps:
        p.grad = torch.randn_like(p) * 1e-3
    return ps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--old", default="", help="a file holding an older AdamWBF16State")
    ap.add_argument("--chunks", default="", help="comma-separated extra chunk sizes for AdamWBF16State")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()
    makers = {"fused AdamW (fp32 moments)": lambda ps: torch.optim.AdamW(ps, lr=1e-5, fused=True),
              "AdamWBF16State (fused kernel)": lambda ps: AdamWBF16State(ps, lr=1e-5, compile=True),
              "AdamWBF16State (eager)": lambda ps: AdamWBF16State(ps, lr=1e-5, compile=False)}
    for c in filter(None, args.chunks.split(",")):
        makers[f"AdamWBF16State (eager) chunk={c}"] = lambda ps, c=int(c): AdamWBF16State(ps, lr=1e-5, chunk=c,
                                                                                          compile=False)
    if args.old:
        spec = importlib.util.spec_from_file_location("optim_old", args.old)
        old = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(old)
        makers["AdamWBF16State (--old)"] = lambda ps: old.AdamWBF16State(ps, lr=1e-5)
    times: dict[str, list[float]] = {k: [] for k in makers}
    ps = params()
    print(f"{sum(p.numel() for p in ps) / 1e6:.1f}M parameters, torch {torch.__version__}, {torch.get_num_threads()} threads")
    for rnd in range(args.rounds):
        for name, make in makers.items():
            opt = make(ps)
            t0 = time.perf_counter()
            opt.step()  # state allocated (and the fused kernel built) outside the timing
            if rnd == 0:
                print(f"{name}: first step {time.perf_counter() - t0:.2f} s")
            for _ in range(args.steps):
                t0 = time.perf_counter()
                opt.step()
                times[name].append(time.perf_counter() - t0)
            del opt
    ref = statistics.median(times["fused AdamW (fp32 moments)"])
    print("| optimizer | s / step (median) | / fused |\n|---|---|---|")
    for name, ts in times.items():
        print(f"| {name} | {statistics.median(ts):.3f} | {statistics.median(ts) / ref:.1f}x |")


if __name__ == "__main__":
    main()
