"""Tables of the Evidence 2 study (issue 14) from what run.py wrote; works on partial results.

    python benchmarks/evidence2/summarize.py --out runs/evidence2 [--dest benchmarks/evidence2/results]
    python benchmarks/evidence2/summarize.py --out runs/evidence2 --pilot

Writes DEST/summary.md (validity of the regime, arms x metrics, held-out pass@k, the key paired
differences with 95% intervals and a resolved / not resolved label), DEST/summary.json (the same
numbers plus each model's correct counts per held-out question: small enough to commit, enough
to redo the statistics), REPORT_DIR/report-s<seed>/ (`tagrpo report`: uniform fraction,
diversity, reward, entropy; REPORT_DIR defaults to DEST) and DEST/figures/{uniform,diversity}-s<seed>.png
(the two plots RESULTS.md shows). With --pilot: DEST/pilot.md, one row per candidate.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import stats as T
import study as S

TRAIN_KEYS = {  # summary name -> metrics.jsonl key (late means)
    "q0_uniform": "uniform/q0", "q0_all_correct": "uniform/q0_all_correct", "q0_all_wrong": "uniform/q0_all_wrong",
    "family_uniform": "uniform/family", "family_all_correct": "uniform/family_all_correct",
    "family_all_wrong": "uniform/family_all_wrong", "reward_q0": "reward/variant_0/mean", "reward": "reward/mean",
    "entropy": "actor/entropy", "diversity": "diversity/mean_pairwise_distance", "length": "response/length_mean",
    "grad_norm": "actor/grad_norm", "logp_on_policy": "train/logp_on_policy", "logp_anchored": "train/logp_anchored",
}
TRAIN_DIFFS = ("q0_all_correct", "family_uniform", "reward_q0")  # paired t over seeds


def read_metrics(run_dir: Path) -> list[dict]:
    rows = {}
    p = run_dir / "metrics.jsonl"
    for ln in (p.read_text().splitlines() if p.exists() else []):
        try:
            m = json.loads(ln)
        except ValueError:
            continue  # a line cut by a kill
        rows[int(m["step"])] = m
    return [rows[k] for k in sorted(rows)]


def train_summary(ms: list[dict], late: float) -> dict | None:
    if not ms:
        return None
    s = {f"late_{name}": T.late_mean([m.get(key) for m in ms], late) for name, key in TRAIN_KEYS.items()}
    s.update({"steps": int(ms[-1]["step"]), "sampled_tokens": int(ms[-1].get("perf/sampled_tokens", 0)),
              "train_s": sum(m.get("time/step", 0.0) for m in ms), "generate_s": sum(m.get("time/generate", 0.0) for m in ms),
              "update_s": sum(m.get("time/train", 0.0) for m in ms)})
    return s


def read_eval(path: Path) -> dict | None:
    """{set: {"ids", "n", "correct", "pass@k", "diversity"}} of a tagrpo eval document."""
    if not path.exists():
        return None
    (model,) = json.loads(path.read_text())["models"]
    out = {}
    for label, b in model["benchmarks"].items():
        kind = label.removeprefix("arith-").split("#")[0]
        qs = b["questions"]
        out[kind] = {"ids": [q["id"] for q in qs], "n": len(qs[0]["samples"]), "correct": [q["n_correct"] for q in qs],
                     "pass@k": b["pass@k"], "diversity": b.get("diversity")}
    return out


def collect(doc: dict, layout: S.Layout) -> dict:
    times = json.loads(layout.times.read_text()) if layout.times.exists() else {}
    late = doc["study"]["late_fraction"]
    runs, partial = {}, {}
    for job in S.jobs(doc):
        ms = read_metrics(layout.run_dir(job))
        if ms and int(ms[-1]["step"]) < doc["train"]["steps"]:  # still training (or killed): not averaged in
            partial[job.name] = int(ms[-1]["step"])
            ms = []
        train = train_summary(ms, late)
        ev = read_eval(layout.eval_out(job.name))
        if train is None and ev is None:
            continue
        wall = sum(seg["seconds"] for seg in times.get(f"train/{job.name}", []))
        runs[job.name] = {"arm": job.arm.id, "seed": job.seed, "train": train, "eval": ev, "wall_s": wall or None}
    return {"base": read_eval(layout.eval_out("base")), "runs": runs, "partial": partial}


def cell(vals, digits: int = 3) -> str:
    vals = [v for v in vals if v is not None]
    if not vals:
        return "–"
    if len(vals) == 1:
        return f"{vals[0]:.{digits}f}"
    return f"{statistics.mean(vals):.{digits}f} ± {statistics.stdev(vals):.{digits}f}"


def by_arm(doc: dict, data: dict) -> dict[int, list[dict]]:
    return {a.id: [r for r in data["runs"].values() if r["arm"] == a.id] for a in S.arms(doc)}


def validity_lines(doc: dict, data: dict) -> list[str]:
    v = doc["study"]["validity"]
    key = "late_" + next(n for n, k in TRAIN_KEYS.items() if k == v["metric"])
    runs = [r for r in data["runs"].values() if r["arm"] == v["arm"] and r["train"]]
    vals = [r["train"][key] for r in runs if r["train"][key] is not None]
    if not vals:
        return [f"**Validity**: no finished run of arm {v['arm']} yet."]
    m = statistics.mean(vals)
    ok = "VALID" if m > v["min"] else "NOT VALID"
    per = ", ".join(f"s{r['seed']} {r['train'][key]:.3f}" for r in runs if r["train"][key] is not None)
    return [(f"**Validity ({ok})**: arm {v['arm']}'s late {v['metric']} = {m:.3f} (mean over {len(vals)} seeds: {per}); "
            f"the study needs > {v['min']}.")]


def train_table(doc: dict, data: dict) -> list[str]:
    head = ["arm", "runs", "q0 uniform", "q0 all-correct", "q0 all-wrong", "family uniform", "family all-correct",
            "family all-wrong", "reward q0", "reward", "entropy", "diversity", "length", "grad norm", "logp on-policy",
            "logp anchored", "sampled tokens", "train s", "wall s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for arm, rs in zip(S.arms(doc), by_arm(doc, data).values()):
        rs = [r for r in rs if r["train"]]
        if not rs:
            continue
        cells = [cell([r["train"][f"late_{k}"] for r in rs], {"length": 1, "grad_norm": 2}.get(k, 3)) for k in TRAIN_KEYS]
        cells += [cell([r["train"]["sampled_tokens"] for r in rs], 0), cell([r["train"]["train_s"] for r in rs], 0),
                  cell([r["wall_s"] for r in rs], 0)]
        lines.append(f"| {arm.id} {arm.name} | {len(rs)} | " + " | ".join(cells) + " |")
    return lines


def eval_table(doc: dict, data: dict) -> list[str]:
    ks = [str(k) for k in doc["eval"]["ks"]]
    head = ["arm", "runs"] + [f"{s} p@{k}" for s in S.EVAL_SETS for k in ks] + ["diversity (train-form)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    rows = [("base model", [data["base"]] if data["base"] else [])]
    rows += [(f"{a.id} {a.name}", [r["eval"] for r in rs if r["eval"]]) for a, rs in zip(S.arms(doc), by_arm(doc, data).values())]
    for label, evs in rows:
        if evs:
            lines.append(f"| {label} | {len(evs)} | " + " | ".join(
                cell([e[s]["pass@k"].get(k) for e in evs if s in e]) for s in S.EVAL_SETS for k in ks)
                + f" | {cell([e['train-form']['diversity'] for e in evs if 'train-form' in e])} |")
    return lines


def paired_diffs(doc: dict, data: dict) -> list[dict]:
    """Every key difference (arm a - arm b, paired by seed) on every held-out set and k, and on the
    training metrics in TRAIN_DIFFS."""
    c, out = doc["compare"], []
    names = {a.id: a.name for a in S.arms(doc)}
    for a, b in c["pairs"]:
        ra = {r["seed"]: r for r in data["runs"].values() if r["arm"] == a}
        rb = {r["seed"]: r for r in data["runs"].values() if r["arm"] == b}
        label = f"{a} {names[a]} − {b} {names[b]}"
        seeds = sorted(s for s in set(ra) & set(rb) if ra[s]["eval"] and rb[s]["eval"])
        for kind in S.EVAL_SETS:
            sd = [s for s in seeds if kind in ra[s]["eval"] and kind in rb[s]["eval"]]
            if not sd:
                continue
            for k in doc["eval"]["ks"]:
                rows = []
                for s in sd:
                    ea, eb = ra[s]["eval"][kind], rb[s]["eval"][kind]
                    if ea["ids"] != eb["ids"]:
                        raise ValueError(f"{kind}: arms {a} and {b} (seed {s}) were evaluated on different questions")
                    rows.append(T.pass_at_k_per_question(ea["n"], ea["correct"], k)
                                - T.pass_at_k_per_question(eb["n"], eb["correct"], k))
                d = np.stack(rows)  # (S, Q)
                m, blo, bhi = T.bootstrap_ci(d, c["bootstrap"], c["rng_seed"], c["level"])
                _, tlo, thi = T.paired_t_ci(d.mean(axis=1), c["level"])
                out.append({"pair": label, "metric": f"{kind} pass@{k}", "seeds": len(sd), "mean": m, "boot": [blo, bhi],
                            "t": [tlo, thi], "verdict": T.verdict((blo, bhi), (tlo, thi))})
        tseeds = sorted(s for s in set(ra) & set(rb) if ra[s]["train"] and rb[s]["train"])
        for key in TRAIN_DIFFS:
            x = [ra[s]["train"][f"late_{key}"] - rb[s]["train"][f"late_{key}"] for s in tseeds
                 if ra[s]["train"][f"late_{key}"] is not None and rb[s]["train"][f"late_{key}"] is not None]
            if x:
                m, tlo, thi = T.paired_t_ci(x, c["level"])
                out.append({"pair": label, "metric": f"late {key}", "seeds": len(x), "mean": m, "boot": None,
                            "t": [tlo, thi], "verdict": T.verdict((tlo, thi))})
    return out


def diff_table(diffs: list[dict], level: float) -> list[str]:
    pct = f"{100 * level:.0f}%"
    head = ["difference", "metric", "seeds", "mean", f"bootstrap {pct} (seeds × questions)", f"paired t {pct} (seeds)", ""]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def iv(x):
        return "–" if x is None or x[0] is None else f"[{x[0]:+.3f}, {x[1]:+.3f}]"

    for d in diffs:
        lines.append(f"| {d['pair']} | {d['metric']} | {d['seeds']} | {d['mean']:+.3f} | {iv(d['boot'])} | {iv(d['t'])} | {d['verdict']} |")
    return lines


def render(doc: dict, data: dict, diffs: list[dict]) -> str:
    lvl, n = doc["compare"]["level"], len(doc["study"]["seeds"])
    lines = ["# Evidence 2: summary", "", *validity_lines(doc, data), "",
             f"## Training, late (last {doc['study']['late_fraction']:.0%} of steps; mean ± sd over seeds)", "",
             *train_table(doc, data), "",
             *([("Not counted (training not finished): "
                 + ", ".join(f"{k} ({v} of {doc['train']['steps']} steps)" for k, v in sorted(data["partial"].items())) + "."), ""]
               if data.get("partial") else []),
             ("Uniform fractions: q0 view = q0's G rewards all equal; family view = all (N+1)·G equal (GRPO: the same). "
             "Entropy is over the trained rows only (uniform groups are skipped). Length: mean sampled response "
             "tokens; grad norm: before clipping; logp on-policy / anchored: mean per-token log-prob of the trained rows "
             "sampled from the prompt they are trained on / sampled for a neighbor and trained on q0 (logged from "
             "session 14 on: – for earlier runs). Sampled tokens and train s cover the "
             "whole run (sum of step times); wall s is the driver's clock (loading, checkpoints included)."), "",
             f"## Held-out pass@k (n = {doc['eval']['samples']}, {doc['eval']['questions']} questions a set; mean ± sd over seeds)", "",
             *eval_table(doc, data), "",
             "## Key differences (paired by seed; pass@k also by question)", "",
             *(diff_table(diffs, lvl) if diffs else ["(no pair of arms has a finished seed in common yet)"]), "",
             (f"resolved: every {lvl:.0%} interval shown excludes 0 (bootstrap: {doc['compare']['bootstrap']} crossed resamples "
              f"of seeds and questions, RNG seed {doc['compare']['rng_seed']}); not resolved otherwise. "
              + (f"With {n} seeds the paired t interval has {n - 1} degrees of freedom "
                 f"(t = {T.t_quantile(1 - (1 - lvl) / 2, n - 1):.2f})." if n > 1 else "A paired t interval needs 2 seeds.")), ""]
    return "\n".join(lines)


FIGURES = ("uniform", "diversity")  # the plots RESULTS.md shows, per seed


def write_report(doc: dict, layout: S.Layout, dest: Path, seeds: list[int], report_dir: Path | None = None) -> None:
    """`tagrpo report` on every run of each seed into REPORT_DIR/report-s<seed>/ (default DEST), and its
    uniform-fraction and diversity plots copied to DEST/figures/<plot>-s<seed>.png, the files RESULTS.md links."""
    exe, report_dir = S.tagrpo_exe(), report_dir or dest
    for seed in seeds:
        dirs = [str(layout.run_dir(j)) for j in S.jobs(doc, seeds=[seed]) if (layout.run_dir(j) / "metrics.jsonl").exists()]
        if not dirs:
            print(f"no run of seed {seed} has metrics yet: no plots for it", file=sys.stderr)
            continue
        rep = report_dir / f"report-s{seed}"
        subprocess.run([exe, "report", *dirs, "-o", str(rep), "--title", f"Evidence 2, seed {seed}"], check=True)
        (dest / "figures").mkdir(parents=True, exist_ok=True)
        for name in FIGURES:
            if (png := rep / f"{name}.png").exists():  # `tagrpo report` draws only the figures that have data
                shutil.copyfile(png, dest / "figures" / f"{name}-s{seed}.png")
            else:
                print(f"seed {seed}: no {name} data, so no figures/{name}-s{seed}.png", file=sys.stderr)


def pilot_lines(doc: dict, layout: S.Layout) -> list[str]:
    v = doc["study"]["validity"]
    head = ["candidate", "mix", "settings", "steps", "base train pass@1 (per difficulty)", "run", "late q0 all-correct",
            "late q0 all-wrong", "late reward q0", "train s", f"valid (> {v['min']})"]
    lines = ["# Evidence 2: pilot", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for cand in doc["pilot"]["candidates"]:
        cdoc, clay = S.pilot_study(doc, cand), S.Layout(layout.out / "pilot" / cand["name"])
        base = read_eval(clay.eval_out("base-train"))
        bcell = "–"
        if base:
            (b,) = base.values()
            per = {}
            for qid, c in zip(b["ids"], b["correct"]):
                per.setdefault(str(qid).split("-")[1], []).append(c / b["n"])
            bcell = f"{b['pass@k']['1']:.3f} (" + ", ".join(f"{d} {statistics.mean(x):.3f}" for d, x in sorted(per.items())) + ")"
        sets = ", ".join(f"{k} {json.dumps(x) if isinstance(x, str) else x}" for k, x in (cand.get("set") or {}).items()) or "–"
        for job in S.jobs(cdoc, doc["pilot"]["arms"], S.pilot_seeds(doc)):
            t = train_summary(read_metrics(clay.run_dir(job)), doc["study"]["late_fraction"])
            ok = "–" if not t or t["late_q0_all_correct"] is None else ("yes" if t["late_q0_all_correct"] > v["min"] else "no")
            vals = [cell([t[k]]) if t else "–" for k in ("late_q0_all_correct", "late_q0_all_wrong", "late_reward_q0")]
            lines.append(f"| {cand['name']} | {cdoc['study']['difficulty_mix']} | {sets} | "
                         f"{t['steps'] if t else 0}/{cdoc['train']['steps']} | {bcell} | {job.name} | " + " | ".join(vals)
                         + f" | {cell([t['train_s']], 0) if t else '–'} | {ok} |")
    return lines + ["", f"valid: arm {v['arm']}'s late {v['metric']} > {v['min']} (the study's condition)", ""]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("runs/evidence2"))
    ap.add_argument("--dest", type=Path, default=S.HERE / "results")
    ap.add_argument("--study", type=Path, default=S.STUDY_FILE)
    ap.add_argument("--pilot", action="store_true", help="summarize the pilot candidates (DEST/pilot.md)")
    ap.add_argument("--report-seeds", default="", help="seeds to plot with tagrpo report (default: the first study seed)")
    ap.add_argument("--report-dir", type=Path, default=None,
                    help="where the full `tagrpo report` of each seed goes (default: DEST); its uniform and diversity plots "
                         "are always copied to DEST/figures/")
    ap.add_argument("--no-report", action="store_true")
    args = ap.parse_args(argv)
    doc = S.load_study(args.study)
    layout = S.Layout(args.out.resolve())
    args.dest.mkdir(parents=True, exist_ok=True)
    if args.pilot:
        md = "\n".join(pilot_lines(doc, layout))
        (args.dest / "pilot.md").write_text(md)
        print(md)
        return 0
    data = collect(doc, layout)
    diffs = paired_diffs(doc, data)
    md = render(doc, data, diffs)
    (args.dest / "summary.md").write_text(md)
    (args.dest / "summary.json").write_text(json.dumps({"base": data["base"], "runs": data["runs"], "partial": data["partial"], "differences": diffs},
                                                       indent=1, allow_nan=False, default=float) + "\n")
    print(md)
    if not args.no_report:
        seeds = [int(x) for x in args.report_seeds.split(",") if x.strip()] or doc["study"]["seeds"][:1]
        write_report(doc, layout, args.dest, seeds, args.report_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
