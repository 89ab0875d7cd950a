"""Resident memory at each point of a short demo training run (set-up, before/after each update,
checkpoint, final save), to see where the peak comes from.

    .venv/bin/python benchmarks/memory/rss_trace.py [key=value ...]   # extra config overrides
"""

import resource
import sys

import psutil

from tagrpo.train import loop as L
from tagrpo.train.config import load_config

p = psutil.Process()


def say(tag: str) -> None:
    print(f"{tag:28s} rss {p.memory_info().rss / 2**20:7.0f} MB  peak {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:7.0f} MB",
          flush=True)


say("start")
cfg = load_config("configs/demo.yaml", ["steps=3", "output_dir=/tmp/rss_trace_run", "save_final=false", "tensorboard=false",
                                        *sys.argv[1:]])
t = L.Trainer(cfg)
t.setup()
say("setup")
real = L.ppo_update


def traced(*a, **k):
    say("before update")
    r = real(*a, **k)
    say("after update")
    return r


L.ppo_update = traced
for s in range(cfg.steps):
    m = t.train_step(s)
    say(f"step {s} rows {m['train/rows']:.0f} skipped {m['train/rows_skipped_zero_adv']:.0f}")
t.save(cfg.steps)
say("after checkpoint save")
t.save_final()
say("after save_final")
