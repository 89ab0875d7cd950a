"""Tables (markdown + JSON) and `tagrpo report` plots for the CPU study made by run.py.

    python benchmarks/reproduce_cpu/summarize.py --out runs/reproduce_cpu --dest benchmarks/reproduce_cpu

Reads OUT/<run>/metrics.jsonl and OUT/eval/<run>.json; writes DEST/summary.md, DEST/summary.json
and DEST/report-*/ (PNGs + index.html). Each eval file is also copied into its run directory as
eval_final.json (and the base model's as eval_base.json) so the report's pass@k plot shows
before/after.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import RUNS  # noqa: E402

METHODS = {  # table row -> runs (seeds)
    "grpo": ["grpo-s0", "grpo-s1"],
    "grpo-matched": ["grpo-matched-s0", "grpo-matched-s1"],
    "ta-grpo": ["ta-grpo-s0", "ta-grpo-s1"],
    "ta-grpo-unanchored": ["ta-grpo-unanchored-s0"],
    "ta-grpo, augment on-uniform": ["ta-grpo-on-uniform-s0"],
}
REPORTS = {
    "methods": ["grpo-s0", "grpo-matched-s0", "ta-grpo-s0", "grpo-s1", "grpo-matched-s1", "ta-grpo-s1"],
    "ablations": ["ta-grpo-s0", "ta-grpo-unanchored-s0", "ta-grpo-on-uniform-s0"],
}


def metrics(run_dir: Path) -> list[dict]:
    rows = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        if line.strip():
            m = json.loads(line)
            rows[m["step"]] = m
    return [rows[k] for k in sorted(rows)]


def evaluation(path: Path) -> dict:
    doc = json.loads(path.read_text())
    (bench,) = doc["models"][0]["benchmarks"].values()
    return bench


def mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def run_summary(name: str, out: Path) -> dict | None:
    rdir = out / name
    if not (rdir / "metrics.jsonl").exists():
        return None
    ms = metrics(rdir)
    late = ms[len(ms) // 2 :]  # second half of training
    ev = evaluation(out / "eval" / f"{name}.json") if (out / "eval" / f"{name}.json").exists() else None
    times = json.loads((out / "times.json").read_text()) if (out / "times.json").exists() else {}
    div = [m["diversity/mean_pairwise_distance"] for m in ms if "diversity/mean_pairwise_distance" in m]
    s = {
        "run": name, "steps": len(ms),
        "reward": mean(m["reward/mean"] for m in ms),
        "reward_q0": mean(m.get("reward/variant_0/mean") for m in ms),
        "reward_q0_late": mean(m.get("reward/variant_0/mean") for m in late),
        "uniform_q0": mean(m["uniform/q0"] for m in ms),
        "uniform_q0_late": mean(m["uniform/q0"] for m in late),
        "uniform_q0_all_correct": mean(m["uniform/q0_all_correct"] for m in ms),
        "uniform_q0_all_wrong": mean(m["uniform/q0_all_wrong"] for m in ms),
        "uniform_family": mean(m.get("uniform/family") for m in ms),
        "uniform_family_late": mean(m.get("uniform/family") for m in late),
        "uniform_family_all_correct": mean(m.get("uniform/family_all_correct") for m in ms),
        "uniform_family_all_wrong": mean(m.get("uniform/family_all_wrong") for m in ms),
        "adv_nonzero": mean(m["adv/nonzero_frac"] for m in ms),
        "diversity_first": div[0] if div else None, "diversity_last": div[-1] if div else None,
        "diversity_train": mean(div),
        "train_wall_s": sum(m["time/step"] for m in ms),
        "run_wall_s": times.get(f"train/{name}"),
        "generate_s": sum(m["time/generate"] for m in ms), "train_s": sum(m["time/train"] for m in ms),
        "sampled_tokens": ms[-1]["perf/sampled_tokens"],
        "responses": sum(m.get("rollout/responses", 0) for m in ms),
    }
    if ev:
        s.update({f"pass@{k}": v for k, v in ev["pass@k"].items()})
        s.update({"eval_diversity": ev.get("diversity"), "eval_length": ev.get("mean_response_length"),
                  "eval_truncation": ev.get("truncation_rate")})
    return s


def fmt(v, digits=3):
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def spread(vals, digits: int = 3):
    vals = [v for v in vals if v is not None]
    if not vals:
        return "–"
    if len(vals) == 1:
        return f"{vals[0]:.{digits}f}"
    return f"{statistics.mean(vals):.{digits}f} ({min(vals):.{digits}f}–{max(vals):.{digits}f})"


def pooled_table(runs: dict, others: list[Path], ks: list[str]) -> list[str]:
    """Per method: mean, standard deviation and range over every replicate (this run's and the
    earlier runs'), for the held-out pass@k and the training-time uniform fractions."""
    pools = {m: [runs[n] for n in names if n in runs] for m, names in METHODS.items()}
    for path in others:
        prev = json.loads(path.read_text())["runs"]
        for m, names in METHODS.items():
            pools[m] += [prev[n] for n in names if n in prev]
    keys = [f"pass@{k}" for k in ks] + ["uniform_q0", "uniform_family", "eval_diversity"]
    lines = ["", f"## Pooled with {', '.join(p.name for p in others)}: mean ± sd [min–max] over n runs", "",
             "| method | n | " + " | ".join(keys) + " |", "|" + "---|" * (len(keys) + 2)]
    for m, ss in pools.items():
        if not ss:
            continue
        cells = []
        for k in keys:
            v = [s[k] for s in ss if s.get(k) is not None]
            sd = statistics.stdev(v) if len(v) > 1 else 0.0
            cells.append(f"{statistics.mean(v):.3f} ± {sd:.3f} [{min(v):.3f}–{max(v):.3f}]" if v else "–")
        lines.append(f"| {m} | {len(ss)} | " + " | ".join(cells) + " |")
    lines += ["", "Welch's t of the difference of means (|t| above ~2.5-3 with these few runs is the least that "
              "could be called a difference):", ""]
    for a, b in (("ta-grpo", "grpo-matched"), ("ta-grpo", "grpo"), ("grpo-matched", "grpo")):
        parts = []
        for k in keys[:len(ks)] + ["uniform_family", "eval_diversity"]:
            x, y = ([s[k] for s in pools[m] if s.get(k) is not None] for m in (a, b))
            if len(x) > 1 and len(y) > 1:
                se = (statistics.variance(x) / len(x) + statistics.variance(y) / len(y)) ** 0.5
                d = statistics.mean(x) - statistics.mean(y)
                parts.append(f"{k} {d:+.3f} (t = {d / se:+.1f})" if se > 0 else f"{k} {d:+.3f}")
        if parts:
            lines.append(f"- {a} − {b}: " + ", ".join(parts))
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("runs/reproduce_cpu"))
    ap.add_argument("--dest", type=Path, default=Path(__file__).resolve().parent)
    ap.add_argument("--no-report", action="store_true")
    ap.add_argument("--also", type=Path, action="append", default=[],
                    help="summary.json of an earlier run of the same study (same code and config): its runs are "
                         "pooled with this one's as extra replicates in a 'pooled' table")
    args = ap.parse_args()
    out, dest = args.out, args.dest
    base = evaluation(out / "eval" / "base.json") if (out / "eval" / "base.json").exists() else None
    runs = {name: s for name, _ in RUNS if (s := run_summary(name, out))}
    ks = sorted({k.split("@")[1] for s in runs.values() for k in s if k.startswith("pass@")} |
                (set(base["pass@k"]) if base else set()), key=int)

    lines = ["## Held-out pass@k and training budget (mean over seeds, range in brackets)", ""]
    head = ["method", "seeds"] + [f"pass@{k}" for k in ks] + ["eval diversity", "train wall s", "sampled tokens"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    if base:
        lines.append("| base model | – | " + " | ".join(fmt(base["pass@k"].get(k)) for k in ks)
                     + f" | {fmt(base.get('diversity'))} | – | – |")
    for method, names in METHODS.items():
        ss = [runs[n] for n in names if n in runs]
        if not ss:
            continue
        lines.append(f"| {method} | {len(ss)} | " + " | ".join(spread([s.get(f'pass@{k}') for s in ss]) for k in ks)
                     + f" | {spread([s.get('eval_diversity') for s in ss])} | {spread([s['train_wall_s'] for s in ss], 0)}"
                     f" | {spread([s['sampled_tokens'] for s in ss], 0)} |")
    lines += ["", "## Uniform-reward groups and diversity during training (mean over steps; late = second half)", ""]
    head = ["method", "q0 uniform", "q0 uniform late", "q0 all-correct", "q0 all-wrong", "family uniform",
            "family uniform late", "family all-correct", "family all-wrong", "non-zero adv", "train reward (q0)", "diversity first→last"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for method, names in METHODS.items():
        ss = [runs[n] for n in names if n in runs]
        if not ss:
            continue
        cells = [spread([s[k] for s in ss]) for k in ("uniform_q0", "uniform_q0_late", "uniform_q0_all_correct", "uniform_q0_all_wrong",
                                                      "uniform_family", "uniform_family_late", "uniform_family_all_correct",
                                                      "uniform_family_all_wrong", "adv_nonzero", "reward_q0")]
        d = f"{spread([s['diversity_first'] for s in ss])} → {spread([s['diversity_last'] for s in ss])}"
        lines.append(f"| {method} | " + " | ".join(cells) + f" | {d} |")
    if args.also:
        lines += pooled_table(runs, args.also, ks)
    lines += ["", "## Every run", ""]
    head = ["run", "steps"] + [f"pass@{k}" for k in ks] + ["q0 uniform", "family uniform", "train wall s", "generate s", "train s",
                                                            "sampled tokens", "responses"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, s in runs.items():
        lines.append(f"| {name} | {s['steps']} | " + " | ".join(fmt(s.get(f'pass@{k}')) for k in ks)
                     + f" | {fmt(s['uniform_q0'])} | {fmt(s['uniform_family'])} | {s['train_wall_s']:.0f} | {s['generate_s']:.0f} | "
                     f"{s['train_s']:.0f} | {int(s['sampled_tokens'])} | {int(s['responses'])} |")
    md = "\n".join(lines) + "\n"
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "summary.md").write_text(md)
    (dest / "summary.json").write_text(json.dumps({"base": {k: base[k] for k in ("pass@k", "diversity", "mean_response_length",
                                                                                   "truncation_rate")} if base else None,
                                                   "runs": runs}, indent=1))
    print(md)
    if args.no_report:
        return
    for name in runs:
        if (out / "eval" / f"{name}.json").exists():
            shutil.copyfile(out / "eval" / f"{name}.json", out / name / "eval_final.json")
            if (out / "eval" / "base.json").exists():
                shutil.copyfile(out / "eval" / "base.json", out / name / "eval_base.json")
    exe = str(Path(sys.executable).parent / "tagrpo")
    for rep, names in REPORTS.items():
        dirs = [str(out / n) for n in names if n in runs]
        if dirs:
            subprocess.run([exe, "report", *dirs, "-o", str(dest / f"report-{rep}"),
                            "--title", f"tagrpo CPU study: {rep}"], check=True)


if __name__ == "__main__":
    main()
