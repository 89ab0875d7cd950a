"""Resident memory of the demo's training, phase by phase (session 5's per-change numbers in
RESULTS.md): RSS, the peak since the phase began (a 20 ms sampler) and glibc's heap (`mallinfo2`:
in use vs free-but-resident) after set-up, each rollout, each update and, with --evals, the demo's
held-out evaluations before and after (24 questions x 4 samples, batch 64).

    .venv/bin/python benchmarks/memory/phases.py --steps 3                 # training only
    .venv/bin/python benchmarks/memory/phases.py --steps 3 --evals         # the demo's flow
    .venv/bin/python benchmarks/memory/phases.py --steps 3 --set keep_freed_memory=false

Linux/glibc only (mallinfo2). One process, so run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import ctypes
import tempfile
import threading
import time

import psutil

PROC = psutil.Process()
PEAK = [0]
PEAK_IN_USE = [0]  # glibc's heap in use (mallinfo2), sampled with the RSS


class _MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                               "fsmblks", "uordblks", "fordblks", "keepcost")]


_MALLINFO2 = None  # glibc's mallinfo2, loaded once (the sampler calls it every 20 ms)


def _mallinfo() -> _MallInfo2:
    global _MALLINFO2
    if _MALLINFO2 is None:
        _MALLINFO2 = ctypes.CDLL("libc.so.6").mallinfo2
        _MALLINFO2.restype = _MallInfo2
    return _MALLINFO2()


def _heap() -> str:
    m = _mallinfo()
    return f"heap {m.arena / 2**20:6.0f}  in use {m.uordblks / 2**20:6.0f}  free {m.fordblks / 2**20:6.0f} MB"


def _sample() -> None:
    while True:
        PEAK[0] = max(PEAK[0], PROC.memory_info().rss)
        m = _mallinfo()
        PEAK_IN_USE[0] = max(PEAK_IN_USE[0], m.uordblks + m.hblkhd)  # heap in use + mmapped chunks
        time.sleep(0.02)


def report(tag: str, start: int) -> None:
    print(f"{tag:28s} start {start / 2**20:6.0f}  peak {PEAK[0] / 2**20:6.0f}  end {PROC.memory_info().rss / 2**20:6.0f} MB  "
          f"{_heap()}  peak in use+mmapped {PEAK_IN_USE[0] / 2**20:6.0f} MB", flush=True)


def phase(tag: str, fn):
    def wrapped(*a, **k):
        start = PEAK[0] = PROC.memory_info().rss
        PEAK_IN_USE[0] = 0
        out = fn(*a, **k)
        time.sleep(0.05)  # let the sampler see the end of the phase
        report(tag, start)
        return out
    return wrapped


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--evals", action="store_true", help="the demo's held-out evaluation before and after training")
    ap.add_argument("--set", action="append", default=[], help="extra key=value for configs/demo.yaml (repeatable)")
    a = ap.parse_args()
    threading.Thread(target=_sample, daemon=True).start()

    import tagrpo.train.loop as L
    from tagrpo.data.arith import generate_problems
    from tagrpo.demo import (
        HELDOUT_KS,
        HELDOUT_QUESTIONS,
        HELDOUT_SAMPLES,
        HELDOUT_SEED,
        preset_path,
    )
    from tagrpo.eval.runner import evaluate
    from tagrpo.rollout import SamplingParams
    from tagrpo.train.config import load_config

    L.rollout = phase("  rollout", L.rollout)
    L.ppo_update = phase("  update", L.ppo_update)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(preset_path("demo"), [f"output_dir={tmp}/run", f"steps={a.steps}", *a.set])
        start = PEAK[0] = PROC.memory_info().rss
        t = L.Trainer(cfg)
        t.setup()
        report("set-up", start)
        policy = t.acc.unwrap_model(t.model)
        held = generate_problems(HELDOUT_QUESTIONS, cfg.arith_difficulty, seed=HELDOUT_SEED, id_prefix="heldout")
        sampling = SamplingParams(temperature=cfg.temperature, top_p=1.0, max_new_tokens=cfg.max_new_tokens, seed=HELDOUT_SEED)
        ev = phase("evaluation", lambda: evaluate(policy, t.tokenizer, held, n=HELDOUT_SAMPLES, ks=list(HELDOUT_KS),
                                                  sampling=sampling, template=cfg.prompt_template, batch_size=64,
                                                  diversity=True, label="arith-heldout"))
        if a.evals:
            ev()
            t.release_free_memory()  # as the demo does
        for step in range(cfg.steps):
            m = t.train_step(step)
            print(f"step {step + 1}: {m['time/step']:.1f} s (generate {m['time/generate']:.1f}, train {m['time/train']:.1f})",
                  flush=True)
        if a.evals:
            t.learner.release_grads()  # as the demo does
            t.release_free_memory()
            ev()


if __name__ == "__main__":
    main()
