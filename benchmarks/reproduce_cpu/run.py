"""CPU-scale reproduction of TA-GRPO's mechanism (issue 6, part 1).

Trains grpo, grpo-matched and ta-grpo (N=3 rule neighbors, G=4) for the same steps and seeds,
plus ta-grpo-unanchored and ta-grpo with `augment: on-uniform` once, all from study.yaml; then
evaluates the base model and every final policy on held-out generated problems (pass@1/4/16).
Each run is a subprocess with its log in OUT/logs/; a run or eval whose output exists is
skipped, so re-running the command resumes the study. Runs go one at a time: on 2 cores
parallel torch processes slow each other down more than they gain.

    python benchmarks/reproduce_cpu/run.py --out runs/reproduce_cpu
    python benchmarks/reproduce_cpu/summarize.py --out runs/reproduce_cpu
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
HELDOUT_SEED = 10_007  # the demo's held-out seed; training problems use seed 0.. (different rows)
RUNS = [  # (name, overrides)
    ("grpo-s0", ["algorithm=grpo", "seed=0"]),
    ("grpo-matched-s0", ["algorithm=grpo-matched", "seed=0"]),
    ("ta-grpo-s0", ["algorithm=ta-grpo", "seed=0"]),
    ("grpo-s1", ["algorithm=grpo", "seed=1"]),
    ("grpo-matched-s1", ["algorithm=grpo-matched", "seed=1"]),
    ("ta-grpo-s1", ["algorithm=ta-grpo", "seed=1"]),
    ("ta-grpo-unanchored-s0", ["algorithm=ta-grpo-unanchored", "seed=0"]),
    ("ta-grpo-on-uniform-s0", ["algorithm=ta-grpo", "augment=on-uniform", "seed=0"]),
]
TEMPLATE = "{question}\nPut your final answer within \\boxed{{}}."  # .format()-escaped, as the train config


def tagrpo() -> str:
    return str(Path(sys.executable).parent / "tagrpo")


def run(cmd: list[str], log: Path) -> float:
    log.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with open(log, "w") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, check=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("runs/reproduce_cpu"))
    ap.add_argument("--only", default="", help="comma-separated run names (default: all)")
    ap.add_argument("--heldout", type=int, default=32, help="held-out questions")
    ap.add_argument("--n", type=int, default=16, help="samples per held-out question")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="extra override for every run")
    args = ap.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)

    from tagrpo.data.arith import generate_problems
    from tagrpo.data.io import write_rows

    cfg = __import__("yaml").safe_load((HERE / "study.yaml").read_text())
    heldout = out / "heldout.jsonl"
    if not heldout.exists():
        write_rows(heldout, generate_problems(args.heldout, cfg["arith_difficulty"], seed=HELDOUT_SEED, id_prefix="heldout"))
    ks = ",".join(str(k) for k in (1, 4, 16) if k <= args.n)
    eval_args = ["--data", str(heldout), "--n", str(args.n), "--k", ks, "--temperature", str(cfg["temperature"]),
                 "--top-p", "1.0", "--max-new-tokens", str(cfg["max_new_tokens"]), "--seed", str(HELDOUT_SEED),
                 "--batch-size", "64", "--dtype", "bf16", "--template", TEMPLATE, "--quiet"]
    times = json.loads((out / "times.json").read_text()) if (out / "times.json").exists() else {}

    def record(key: str, seconds: float) -> None:
        times[key] = seconds
        (out / "times.json").write_text(json.dumps(times, indent=1))

    if not (out / "eval" / "base.json").exists():
        print("eval base", flush=True)
        record("eval/base", run([tagrpo(), "eval", "--model", cfg["model"], *eval_args, "-o", str(out / "eval" / "base.json")],
                                out / "logs" / "eval-base.log"))
    names = [r for r in RUNS if not args.only or r[0] in args.only.split(",")]
    for name, ov in names:
        rdir = out / name
        if not (rdir / "final").exists():
            print(f"train {name}", flush=True)
            sets = [f"output_dir={rdir}", *ov, *args.sets]
            cmd = [tagrpo(), "train", "--config", str(HERE / "study.yaml")] + [a for s in sets for a in ("--set", s)]
            record(f"train/{name}", run(cmd, out / "logs" / f"train-{name}.log"))
        if not (out / "eval" / f"{name}.json").exists():
            print(f"eval {name}", flush=True)
            record(f"eval/{name}", run([tagrpo(), "eval", "--model", str(rdir / "final"), *eval_args,
                                        "-o", str(out / "eval" / f"{name}.json")], out / "logs" / f"eval-{name}.log"))
    print("done", flush=True)


if __name__ == "__main__":
    main()
