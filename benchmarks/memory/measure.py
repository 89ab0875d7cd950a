"""Peak resident memory (and wall time) of `make demo`'s job and of a short demo training run,
for one source tree or two side by side (issue 12, part 2).

Each command runs in its own process under `/usr/bin/time -v` (peak RSS = "Maximum resident set
size"), with PYTHONPATH pointing at the source tree to measure, so a checkout of an older commit
(`git worktree add /tmp/base <commit>`) can be measured with the same environment:

    .venv/bin/python benchmarks/memory/measure.py --tree before=/tmp/base/src --tree after=src \\
        --out benchmarks/memory/results.json

Jobs: `demo` (`tagrpo demo`, what `make demo` runs) and `train3` (`tagrpo train --config
configs/demo.yaml --set steps=3`). Trees are interleaved per job so both see the same machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from machine import commit, cpu_name  # benchmarks/machine.py

JOBS = {
    "demo": ["demo", "--output-dir", "{run}"],
    "train3": ["train", "--config", str(ROOT / "configs" / "demo.yaml"), "--set", "steps=3", "--set", "output_dir={run}"],
}


def run(tree: str, job: str, extra: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        args = [a.replace("{run}", str(Path(tmp) / "run")) for a in JOBS[job]] + extra
        cmd = ["/usr/bin/time", "-v", sys.executable, "-c", "from tagrpo.cli import main; main()", *args]
        env = dict(os.environ, PYTHONPATH=str(Path(tree).resolve()), TOKENIZERS_PARALLELISM="false")
        t0 = time.perf_counter()
        r = subprocess.run(cmd, env=env, cwd=tmp, capture_output=True, text=True)
        wall = time.perf_counter() - t0
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr)
    if r.returncode != 0 or not m:
        raise SystemExit(f"{job} on {tree} failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
    return {"peak_rss_mb": int(m.group(1)) / 1024, "wall_s": wall, "stdout_tail": r.stdout[-1500:]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", action="append", required=True, help="NAME=PATH of a tagrpo src/ directory (repeatable)")
    ap.add_argument("--jobs", default="train3,demo")
    ap.add_argument("--set", action="append", default=[], help="extra --set for train3")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    trees = dict(t.split("=", 1) for t in a.tree)
    res: dict = {"machine": platform.processor() or platform.machine(), "results": {}}
    res["cpu"], res["commit"] = cpu_name(), commit()
    for job in a.jobs.split(","):
        for name, tree in trees.items():
            extra = [x for s in a.set for x in ("--set", s)] if job == "train3" else []
            r = run(tree, job, extra)
            res["results"].setdefault(job, {})[name] = r
            print(f"{job:8s} {name:8s} peak RSS {r['peak_rss_mb']:8.0f} MB  wall {r['wall_s']:6.1f} s", flush=True)
    res["command"] = " ".join(sys.argv)
    res["when"] = time.strftime("%Y-%m-%d %H:%M")
    Path(a.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
