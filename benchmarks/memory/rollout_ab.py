"""One rollout's peak memory and time, for one or more source trees side by side (issue 12 part 2,
issue 15): the demo's rollout shape on the embedded SmolLM2-135M-Instruct, the lean engine
(`HFGenerateEngine(dtype="bf16", lean=True)`, as the demo's trainer builds it on a CPU with bf16
units), glibc's keep-freed-memory settings, 8 distinct prompts x 4 samples = 32 rows, up to 64
new tokens, T=0.6, per-row seeds. Each tree runs in its own process (PYTHONPATH), the trees
interleaved, `--reps` generate calls a process (the first is the warm-up, reported apart). `--vary
FILE`: 8 other questions of a JSONL file every call (GSM8K: other prompt widths, as a training
run meets them), and the heap in use after each call.

    .venv/bin/python benchmarks/memory/rollout_ab.py --tree before=/tmp/base/src --tree after=src \\
        --out benchmarks/memory/results/rollout_ab.json

Peak RSS and peak heap in use (glibc mallinfo2) come from a 5 ms sampler thread within each call
(relative to the call's start; the heap is trimmed before each call, as the lean trainer does
between phases). `tokens` is a hash of the sampled tokens: equal across trees when they sample alike. Linux/glibc only; run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from machine import commit, cpu_name  # benchmarks/machine.py

CHILD = r"""
import json, sys, threading, time
import psutil
from tagrpo._malloc import keep_freed_memory, mallinfo, release_free_memory
keep_freed_memory()
from tagrpo.data.arith import generate_problems
from tagrpo.models.loader import load_policy
from tagrpo.rollout import HFGenerateEngine, SamplingParams
from tagrpo.rollout.prompts import build_prompt_ids
proc = psutil.Process()
peak = {"rss": 0, "in_use": 0}
def sample():
    while True:
        peak["rss"] = max(peak["rss"], proc.memory_info().rss)
        peak["in_use"] = max(peak["in_use"], mallinfo().uordblks)
        time.sleep(0.005)
threading.Thread(target=sample, daemon=True).start()
model, tok = load_policy()
model.train()
vary = sys.argv[2]
if vary:
    import random
    gsm = [json.loads(ln)["question"] for ln in open(vary)]
def rows_for(rep):
    if vary:  # 8 GSM8K questions a call: prompt widths vary as in a training run on GSM8K
        probs = [{"question": q} for q in random.Random(rep).sample(gsm, 8)]
    else:
        probs = generate_problems(8, 1, seed=7)
    prompts = [build_prompt_ids(tok, p["question"], "{question}\nPut your final answer within \\boxed{{}}.") for p in probs]
    return [p for p in prompts for _ in range(4)]
eng = HFGenerateEngine(model, tok, dtype="bf16", max_batch_size=64, lean=True)
params = SamplingParams(temperature=0.6, max_new_tokens=64)
out = []
for rep in range(int(sys.argv[1])):
    eng.release_copy()  # as the lean trainer does between phases
    release_free_memory()
    rss0, use0 = proc.memory_info().rss, mallinfo().uordblks
    peak["rss"], peak["in_use"] = rss0, use0
    t = time.perf_counter()
    rows = rows_for(rep)
    res = eng.generate(rows, params, seeds=list(range(len(rows))))
    dt = time.perf_counter() - t
    time.sleep(0.02)
    ntok = sum(len(c.token_ids) for c in res)
    out.append({"s": dt, "tokens": ntok, "tok_per_s": ntok / dt, "peak_rss_rise_mb": (peak["rss"] - rss0) / 2**20,
                "peak_in_use_rise_mb": (peak["in_use"] - use0) / 2**20, "tokens_hash": hash(tuple(tuple(c.token_ids) for c in res)),
                "prompt_width": max(len(r) for r in rows), "in_use_after_mb": mallinfo().uordblks / 2**20})
print("RESULT " + json.dumps(out))
"""


def run(tree: str, reps: int, vary: str = "") -> list[dict]:
    env = dict(os.environ, PYTHONPATH=str(Path(tree).resolve()), TOKENIZERS_PARALLELISM="false", PYTHONHASHSEED="0")
    p = subprocess.run([sys.executable, "-c", CHILD, str(reps), vary], env=env, capture_output=True, text=True, check=True)
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", action="append", required=True, help="NAME=PATH of a src/ directory (repeatable)")
    ap.add_argument("--reps", type=int, default=4, help="generate calls per process (the first is the warm-up)")
    ap.add_argument("--rounds", type=int, default=2, help="processes per tree, interleaved")
    ap.add_argument("--vary", default="", metavar="JSONL",
                    help="8 other questions of this file (a `question` field a row, e.g. ../shared/data/gsm8k_train.jsonl) "
                         "every call: other prompt widths, as a training run meets them; reports the heap in use after each")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    trees = dict(t.split("=", 1) for t in a.tree)
    results: dict[str, list] = {name: [] for name in trees}
    for r in range(a.rounds):
        for name, path in trees.items():
            calls = run(path, a.reps, str(Path(a.vary).resolve()) if a.vary else "")
            results[name].append(calls)
            timed = calls[1:]
            print(f"round {r} {name:8s} warm-up {calls[0]['s']:.2f} s; timed: "
                  + ", ".join(f"{c['s']:.2f} s {c['tok_per_s']:.0f} tok/s rss +{c['peak_rss_rise_mb']:.0f} in use +{c['peak_in_use_rise_mb']:.0f} MB tokens {c['tokens_hash'] % 10**6:06d}"
                              for c in timed), flush=True)
            if a.vary:
                print(f"  prompt widths {[c['prompt_width'] for c in calls]}; heap in use after each call, MB: "
                      f"{[round(c['in_use_after_mb']) for c in calls]}", flush=True)
    doc = {"cpu": cpu_name(), "commit": commit(), "command": " ".join(sys.argv), "when": time.strftime("%Y-%m-%d %H:%M"), "results": results}
    if a.out:
        Path(a.out).write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
