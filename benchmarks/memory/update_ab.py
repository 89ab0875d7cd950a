"""The demo's PPO update with and without bf16-CPU width rounding (`rollout.batching.CPU_BF16_WIDTH_MULTIPLE`),
on the same synthetic rows: step time, peak RSS and glibc's heap in use after each update.

oneDNN compiles and keeps a kernel for every matrix shape it meets; an update whose micro-batch
widths (prompt + response) and lm_head chunk row counts take new values every step meets new
shapes every step, and the heap grows with them. Rounding both up to a multiple of 16 bounds the
shapes. Each variant runs in its own processes (a process's kernel cache is what is measured),
interleaved A, B, A, B, every process on the same rows (seeded): 2 families of 8 rows an update
(the demo's TA-GRPO shape), prompts 70-110 tokens, responses 8-64, random token ids, advantages
non-zero.

    .venv/bin/python benchmarks/memory/update_ab.py --updates 8 --rounds 2 --out benchmarks/memory/results/update_ab.json
    .venv/bin/python benchmarks/memory/update_ab.py --set gradient_checkpointing=false ...   # the shared-prefix forward

Linux/glibc only (mallinfo2). Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]
from machine import commit, cpu_name  # benchmarks/machine.py
from phases import (  # the RSS sampler and glibc's mallinfo2 of phases.py
    PEAK,
    PROC,
    _mallinfo,
    _sample,
)


def synthetic_samples(step: int, vocab: int, families: int = 2, per_family: int = 8):
    """The rows of one update: each family one anchor prompt (q0) and `per_family` responses."""
    import random

    from tagrpo.train.batch import Sample

    rng = random.Random(1000 + step)
    out = []
    for f in range(families):
        q0 = [rng.randrange(100, vocab) for _ in range(rng.randint(70, 110))]
        for j in range(per_family):
            resp = [rng.randrange(100, vocab) for _ in range(rng.randint(8, 64))]
            out.append(Sample(family=f, variant=j // 2, gen_prompt_ids=q0, anchor_prompt_ids=q0, response_ids=resp, text="",
                              finished=True, adv=rng.choice([-1.0, 1.0]) * rng.uniform(0.2, 1.5)))
    return out


def child(multiple: int, updates: int, overrides: list[str]) -> None:
    threading.Thread(target=_sample, daemon=True).start()
    from tagrpo.demo import preset_path
    from tagrpo.rollout import batching
    from tagrpo.train.config import load_config
    from tagrpo.train.loop import Trainer
    from tagrpo.train.update import ppo_update

    batching.CPU_BF16_WIDTH_MULTIPLE = multiple  # the update reads it at every call
    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(preset_path("demo"), [f"output_dir={tmp}/run", *overrides])
        t = Trainer(cfg)
        t.setup()
        vocab = t.tokenizer.vocab_size
        rows = []
        for step in range(updates):
            samples = synthetic_samples(step, vocab)
            t.learner.release_grads()  # as train_step does before its rollout
            t.release_free_memory()
            start = PEAK[0] = PROC.memory_info().rss
            t0 = time.perf_counter()
            ppo_update(t.learner, samples, cfg)
            sec = time.perf_counter() - t0
            time.sleep(0.05)
            m = _mallinfo()
            rows.append({"update": step + 1, "seconds": round(sec, 2), "rss_start_mb": round(start / 2**20),
                         "rss_peak_mb": round(PEAK[0] / 2**20), "heap_in_use_mb": round(m.uordblks / 2**20)})
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print(json.dumps(rows))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--updates", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--multiples", default="1,16", help="width multiples to compare (1 = no rounding)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override configs/demo.yaml (repeatable), e.g. gradient_checkpointing=false (the shared-prefix forward)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child is not None:
        child(a.child, a.updates, a.set)
        return
    from tagrpo import __version__  # noqa: F401  (the package must import)

    runs = []
    for r in range(a.rounds):
        for mult in [int(x) for x in a.multiples.split(",")]:
            print(f"round {r + 1}, width multiple {mult}", flush=True)
            out = subprocess.run([sys.executable, __file__, "--child", str(mult), "--updates", str(a.updates),
                                  *[x for kv in a.set for x in ("--set", kv)]],
                                 capture_output=True, text=True, env=os.environ, check=False)
            if out.returncode:
                sys.exit(out.stderr)
            rows = json.loads(out.stdout.strip().splitlines()[-1])
            runs.append({"round": r + 1, "width_multiple": mult, "updates": rows})
            s = sum(x["seconds"] for x in rows)
            print(f"  total {s:.1f} s, peak RSS {max(x['rss_peak_mb'] for x in rows)} MB, heap in use after each: "
                  f"{[x['heap_in_use_mb'] for x in rows]}", flush=True)
    doc = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "cpu": cpu_name(), "commit": commit(), "runs": runs}
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
