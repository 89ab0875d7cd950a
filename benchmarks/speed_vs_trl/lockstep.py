"""Step time of trainer variants measured in lockstep: paired per step, robust to a VM's drift.

`bench.py` runs its rows one after another, each in its own process for all its steps; on a
shared VM the machine's speed drifts over minutes (the same row with identical work measured
9.3 s a step in one run and 12.0 s in another, `benchmarks/memory/session18/`), so a row that
ran in a slow stretch looks slower than it is. Here every row's process is set up first, then
the rows take turns ONE STEP AT A TIME (the others wait on a pipe, using no CPU), in the order
A B B A A B ... so that step k of every row runs within seconds of the others. The comparison is
then per step: the ratio of a row's step k to the reference row's step k, summarized as the
geometric mean over the timed steps with a 95% t interval (and the median). A drift slower
than a step cancels in each ratio; what is left is the rows' difference plus the step-to-step
differences in work (each row samples its own answers after the first update).

    .venv/bin/python benchmarks/speed_vs_trl/lockstep.py --steps 12 --warmup 2 \\
        --row 2ceab13=/tmp/base/src: \\
        --row gc-bf16m=src:gradient_checkpointing=true,optimizer_state=bf16,bf16_adamw_kernel=fused \\
        --out benchmarks/memory/session19/lockstep_r1

`--row LABEL=SRC:KEY=VAL,...`: the tagrpo `src/` to import (e.g. another commit's, from
`git worktree add /tmp/base REV`) and the settings on top of bench.py's (empty after the colon:
none). The first row is the reference. `--config` picks bench.py's configuration (default
tagrpo-grpo-noskip: GRPO, 4 questions x 4 answers, every row trained). Peak RSS is each
process's own (all rows' processes are resident at once, so the machine needs their sum).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def t975(df: int) -> float:
    """Two-sided 95% Student t quantile."""
    from scipy.stats import t

    return float(t.ppf(0.975, df))


def parse_row(spec: str) -> tuple[str, str, list[str]]:
    """'LABEL=SRC:K=V,K=V' -> (label, src, ['K=V', ...]); ValueError naming the spec otherwise."""
    label, eq, rest = spec.partition("=")
    src, colon, sets = rest.partition(":")
    kv = [x for x in sets.split(",") if x]
    if not label or not eq or not src or not colon or any("=" not in x for x in kv):
        raise ValueError(f"--row {spec!r}: expected LABEL=SRC:KEY=VAL,... (e.g. base=/tmp/base/src: or gc=src:gradient_checkpointing=true)")
    return label, src, kv


def turn_order(labels: list[str], step: int) -> list[str]:
    """The rows' order at `step`: forward on even steps, reversed on odd (A B, B A, A B, ...)."""
    return list(labels) if step % 2 == 0 else list(reversed(labels))


def paired_ratios(ref: list[float], other: list[float]) -> dict:
    """Per-step ratios other[k] / ref[k]: geometric mean with a 95% t interval over steps, median."""
    if len(ref) != len(other) or not ref:
        raise ValueError(f"paired_ratios: {len(ref)} reference steps vs {len(other)}")
    logs = [math.log(o / r) for r, o in zip(ref, other)]
    n, mean = len(logs), statistics.fmean(logs)
    half = t975(n - 1) * statistics.stdev(logs) / math.sqrt(n) if n > 1 else float("inf")
    return {"n": n, "geomean": math.exp(mean), "lo": math.exp(mean - half), "hi": math.exp(mean + half),
            "median": statistics.median(o / r for r, o in zip(ref, other)), "ratios": [round(math.exp(x), 4) for x in logs]}


class Child:
    """One row's process (bench.py --child), driven through two pipes (see bench.Lockstep)."""

    def __init__(self, label: str, cmd: list[str], env: dict):
        go_r, self.go = os.pipe()
        self.done, done_w = os.pipe()
        self.label, self.started = label, time.perf_counter()
        self.proc = subprocess.Popen(cmd, env={**env, "TAGRPO_BENCH_LOCKSTEP": f"{go_r},{done_w}"}, pass_fds=(go_r, done_w))
        os.close(go_r)
        os.close(done_w)

    def wait_signal(self, what: str) -> None:
        if os.read(self.done, 1) != b".":
            rc = self.proc.wait()
            raise RuntimeError(f"row {self.label}: its process ended (exit {rc}) while waiting for {what}")

    def step(self) -> None:
        os.write(self.go, b".")
        self.wait_signal("a step")

    def finish(self) -> None:
        os.close(self.go)
        rc = self.proc.wait()
        os.close(self.done)
        if rc != 0:
            raise RuntimeError(f"row {self.label}: exit {rc}")


def run_lockstep(children: list[Child], steps: int, log=print) -> None:
    """Wait until every row is set up (their processes set up side by side: not timed), then run
    `steps` steps taking turns (turn_order)."""
    for c in children:
        c.wait_signal("its set-up")
        log(f"{c.label}: set up ({time.perf_counter() - c.started:.0f} s after its start)")
    by_label = {c.label: c for c in children}
    for step in range(steps):
        for label in turn_order(list(by_label), step):
            by_label[label].step()
        log(f"step {step + 1}/{steps} done")
    for c in children:
        c.finish()


def summarize(labels: list[str], raw: dict[str, dict], warmup: int) -> dict:
    """Per-row medians and, for every row after the first, per-step paired ratios to the first."""
    keys = {"step": "step s", "gen": "generate s", "train": "train s"}
    timed = {lb: raw[lb]["steps"][warmup:] for lb in labels}
    rows = [{"row": lb, **{name: statistics.median(r[k] for r in timed[lb]) for k, name in keys.items()},
             "peak RSS MB": raw[lb]["peak_rss_mb"], "step s (all)": [round(r["step"], 2) for r in raw[lb]["steps"]],
             "sampled tokens": sum(r["sampled_tokens"] for r in timed[lb])} for lb in labels]
    ref = labels[0]
    pairs = [{"row": lb, "vs": ref, **{name: paired_ratios([r[k] for r in timed[ref]], [r[k] for r in timed[lb]])
                                       for k, name in keys.items()}} for lb in labels[1:]]
    return {"rows": rows, "paired": pairs}


def markdown(doc: dict) -> str:
    lines = ["| row | step s | generate s | train s | sampled tokens (timed) | peak RSS MB |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['row']} | {r['step s']:.2f} | {r['generate s']:.2f} | {r['train s']:.2f} | {r['sampled tokens']:.0f} | "
              f"{r['peak RSS MB']:.0f} |" for r in doc["rows"]]
    lines += ["", "Per-step ratios to the first row (geometric mean over the timed steps [95% t interval]; median):", "",
              "| row / reference | step | generate | train |", "|---|---|---|---|"]
    fmt = lambda p: f"{p['geomean']:.3f} [{p['lo']:.3f}, {p['hi']:.3f}]; {p['median']:.3f}"
    lines += [f"| {p['row']} / {p['vs']} | {fmt(p['step s'])} | {fmt(p['generate s'])} | {fmt(p['train s'])} |"
              for p in doc["paired"]]
    lines += ["", f"Command: `{doc['command']}` ({doc['date']}); {doc['machine']}."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--row", action="append", required=True, metavar="LABEL=SRC:KEY=VAL,...",
                    help="a row: tagrpo src/ to import and settings on top of bench.py's; the first is the reference; repeat")
    ap.add_argument("--steps", type=int, default=12, help="timed steps a row")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--config", default="tagrpo-grpo-noskip", help="bench.py's tagrpo configuration")
    ap.add_argument("--dtype", choices=("auto", "bf16", "fp32"), default="auto")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    try:
        rows = [parse_row(r) for r in args.row]
    except ValueError as e:
        ap.error(str(e))
    labels = [r[0] for r in rows]
    if len(set(labels)) != len(labels) or len(rows) < 2:
        ap.error(f"--row: need at least two rows with distinct labels (got {labels})")
    for label, src, _ in rows:
        if not (Path(src) / "tagrpo").is_dir():
            ap.error(f"--row {label}: {src} has no tagrpo/ package (expected a src/ directory)")
    if not args.config.startswith("tagrpo"):
        ap.error(f"--config {args.config!r}: lockstep drives tagrpo configurations only")
    sys.path.insert(0, str(HERE))
    import bench

    args.out.mkdir(parents=True, exist_ok=True)
    total = args.steps + args.warmup
    base_env = {**os.environ, "TAGRPO_BENCH_DTYPE": bench.resolve_dtype(args.dtype)}
    children = []
    try:
        for label, src, sets in rows:
            env = {**base_env, "PYTHONPATH": str(Path(src).resolve()), "TAGRPO_BENCH_SETS": ",".join(sets)}
            children.append(Child(label, [sys.executable, str(HERE / "bench.py"), "--child", args.config, str(total),
                                          str(args.out / f"raw-{label}.json")], env))
        run_lockstep(children, total, log=lambda s: print(s, flush=True))
    finally:
        for c in children:
            if c.proc.poll() is None:
                c.proc.kill()
    raw = {lb: json.loads((args.out / f"raw-{lb}.json").read_text()) for lb in labels}
    import torch

    doc = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "date": time.strftime("%Y-%m-%d %H:%M"),
           "machine": f"{platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}",
           "config": args.config, "rows_spec": args.row, "warmup": args.warmup, **summarize(labels, raw, args.warmup)}
    (args.out / "results.json").write_text(json.dumps(doc, indent=1))
    (args.out / "results.md").write_text(markdown(doc))
    print(markdown(doc))


if __name__ == "__main__":
    main()
