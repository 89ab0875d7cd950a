"""Evidence 2 study driver (issue 14): trains the six arms x seeds of study.yaml one job at a time,
then evaluates the base model and every final policy on three held-out sets (pass@k).

Resumable: re-running the same command continues where it stopped. A finished run (final/ and
every step in metrics.jsonl) is never re-run; a killed one continues from its last checkpoint
(`tagrpo train --resume`); an evaluation whose JSON exists is not redone. The driver forwards
SIGTERM to the job (the trainer then saves a checkpoint and stops) and exits. Every job logs to
OUT/logs/, the driver to OUT/logs/driver.log; wall time of each job segment goes to OUT/times.json.

    python benchmarks/evidence2/run.py --pilot --out runs/evidence2        # choose the PILOT values
    python benchmarks/evidence2/run.py --out runs/evidence2                # the study (hours)
    python benchmarks/evidence2/run.py --out runs/evidence2 --arms 1,4 --seeds 0 --dry-run
    python benchmarks/evidence2/summarize.py --out runs/evidence2

Across sessions (a session's OUT does not outlive it): `--archive DIR` copies each finished
run's metrics.jsonl and config.yaml, and each evaluation's JSON, to DIR (small: commit them). A
later run with the same --archive and a fresh OUT restores an archived run (every step's metrics,
the same settings, and its evaluation when evaluating) into OUT instead of training it again:

    python benchmarks/evidence2/run.py --out runs/evidence2 --archive benchmarks/evidence2/results/study
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import study as S

LOCKED = ("study", "train", "arms", "eval")  # what an output directory is bound to (seeds may grow)


def metrics_steps(run_dir: Path) -> int:
    """The last step logged in metrics.jsonl (0 when none)."""
    p, last = run_dir / "metrics.jsonl", 0
    if p.exists():
        for ln in p.read_text().splitlines():
            try:
                last = max(last, int(json.loads(ln).get("step", 0)))
            except (ValueError, AttributeError):
                continue  # a line cut by a kill
    return last


def run_state(run_dir: Path, steps: int) -> str:
    """'done' (final model and every step's metrics), 'resume' (a complete checkpoint to continue
    from) or 'fresh'."""
    from tagrpo.train.checkpoint import latest_checkpoint

    if (run_dir / "final" / "config.json").is_file() and metrics_steps(run_dir) >= steps:
        return "done"
    if (run_dir / "config.yaml").is_file() and latest_checkpoint(run_dir) is not None:
        return "resume"
    return "fresh"


def lock_view(doc: dict) -> dict:
    view = {k: doc[k] for k in LOCKED}
    view["study"] = {k: v for k, v in view["study"].items() if k != "seeds"}
    view["arms"] = [{k: v for k, v in a.items() if k != "tests"} for a in view["arms"]]
    return json.loads(json.dumps(view, sort_keys=True, default=str))


def check_lock(doc: dict, layout: S.Layout, write: bool) -> None:
    """OUT is bound to the settings it was started with: data, eval sets and runs must not mix."""
    p, view = layout.out / "study.lock.json", lock_view(doc)
    if p.exists():
        old = json.loads(p.read_text())
        diff = [k for k in LOCKED if old.get(k) != view[k]]
        if diff:
            raise S.StudyError(f"{layout.out} was started with other settings in {diff} (see {p}); "
                               "use a new --out, or restore study.yaml")
    elif write:
        layout.out.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(view, indent=1, sort_keys=True) + "\n")


def prepare(doc: dict, layout: S.Layout, *, eval_sets: bool, dry: bool) -> list[str]:
    """train.yaml, the training questions and (for the study) the held-out sets, each written
    once; returns warnings about the data."""
    import yaml

    check_lock(doc, layout, write=not dry)
    if dry:
        return []
    layout.train_yaml.write_text("# written by benchmarks/evidence2/run.py from study.yaml (section train)\n"
                                 + yaml.safe_dump(doc["train"], sort_keys=False))
    from tagrpo.data.io import write_rows

    rows = S.training_rows(doc)
    for kind in S.DATA_KINDS:
        if not layout.data(kind).exists():
            layout.data(kind).parent.mkdir(parents=True, exist_ok=True)
            write_rows(layout.data(kind), rows[kind])
    if eval_sets and not all(layout.eval_data(k).exists() for k in S.EVAL_SETS):
        from tagrpo.data.arith_eval import write_eval_sets

        ev = doc["eval"]
        write_eval_sets(layout.eval_data("x").parent, ev["questions"], ev["difficulty"], ev["seed"], ev["extra_ops"],
                        avoid=rows["scaled"])  # scaled contains Q
    return S.rule_neighbor_shortfall(doc, rows["Q"], doc["study"]["seeds"])


class Runner:
    """Runs one subprocess at a time, logs it, records its wall time; forwards SIGTERM/SIGINT.
    `layout` is the output directory of the jobs it runs now (the pilot switches it per candidate)."""

    def __init__(self, layout: S.Layout, dry: bool):
        self.layout, self.dry, self.child, self.stop = layout, dry, None, False

    def say(self, msg: str) -> None:
        line = f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] {msg}"
        print(("# " if self.dry else "") + line, flush=True)
        if not self.dry and self.layout.out.exists():
            (self.layout.out / "logs").mkdir(exist_ok=True)
            with open(self.layout.out / "logs" / "driver.log", "a") as f:
                f.write(line + "\n")

    def install(self) -> dict:
        """Forward SIGTERM / SIGINT to the running job; returns the previous handlers."""
        def handler(signum, frame):
            self.stop = True
            if self.child is not None and self.child.poll() is None:
                self.child.send_signal(signal.SIGTERM)  # the trainer checkpoints after this step and exits
        return {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}

    def __call__(self, key: str, cmd: list[str]) -> int:
        log = self.layout.log(key.replace("/", "-"))
        if self.dry:
            print(" ".join(_quote(c) for c in cmd))
            return 0
        self.say(f"{key}: {' '.join(cmd[1:3])} ... (log {log})")
        log.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        t0 = time.time()
        with open(log, "a") as f:
            f.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} $ {' '.join(_quote(c) for c in cmd)}\n")
            f.flush()
            self.child = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True)
            rc = self.child.wait()
            self.child = None
        times = json.loads(self.layout.times.read_text()) if self.layout.times.exists() else {}
        times.setdefault(key, []).append({"start": t0, "seconds": time.time() - t0, "rc": rc})
        self.layout.times.write_text(json.dumps(times, indent=1))
        self.say(f"{key}: exit {rc} after {time.time() - t0:.0f} s")
        return rc


def _quote(s: str) -> str:
    import shlex

    return shlex.quote(s)


ARCHIVED = ("metrics.jsonl", "config.yaml")  # what --archive keeps of a run (no weights)


def check_run_config(doc: dict, job: S.Job, layout: S.Layout, run_dir: Path) -> None:
    """StudyError unless run_dir/config.yaml (a run in OUT or in the archive) has the settings the
    study asks for this job."""
    import yaml

    bad = S.config_mismatch(S.run_settings(doc, job, layout), yaml.safe_load((run_dir / "config.yaml").read_text()))
    if bad:
        raise S.StudyError(f"{run_dir} was made with other settings ({'; '.join(bad)}); move it away or restore study.yaml")


def _merge_times(src: Path, dst: Path, keys: list[str]) -> None:
    """Copy the wall-time segments of `keys` from one times.json to another (the destination's
    own segments of those keys are replaced; its other keys are kept)."""
    have = json.loads(src.read_text()) if src.exists() else {}
    picked = {k: have[k] for k in keys if k in have}
    if not picked:
        return
    out = json.loads(dst.read_text()) if dst.exists() else {}
    out.update(picked)
    tmp = dst.with_suffix(".tmp")
    tmp.write_text(json.dumps(out, indent=1))
    tmp.replace(dst)


def _time_keys(name: str) -> list[str]:
    return [f"train/{name}", f"eval/{name}"]


def archive_result(layout: S.Layout, archive: Path, name: str, run_dir: Path | None) -> None:
    """Copy a finished job's small results to `archive`: the run's ARCHIVED files (when run_dir),
    its evaluation JSON (when there is one) and its wall-time segments (archive/times.json)."""
    archive.mkdir(parents=True, exist_ok=True)
    _merge_times(layout.times, archive / "times.json", _time_keys(name))
    if run_dir is not None:
        dst = archive / "runs" / name
        dst.mkdir(parents=True, exist_ok=True)
        for f in ARCHIVED:
            shutil.copy2(run_dir / f, dst / f)
    ev = layout.eval_out(name)
    if ev.exists():
        (archive / "eval").mkdir(parents=True, exist_ok=True)
        shutil.copy2(ev, archive / "eval" / ev.name)


def restore_result(doc: dict, job: S.Job, layout: S.Layout, archive: Path, evaluate: bool) -> bool:
    """Copy an archived run (and its evaluation, and its wall time) into OUT when it is complete:
    every step's metrics, and the evaluation JSON if the study evaluates. Its settings must be the study's
    (else StudyError, as for a run in OUT). Returns whether it was restored."""

    src, ev = archive / "runs" / job.name, archive / "eval" / f"{job.name}.json"
    if not (src / "config.yaml").is_file() or metrics_steps(src) < int(doc["train"]["steps"]) or (evaluate and not ev.is_file()):
        return False
    check_run_config(doc, job, layout, src)
    dst = layout.run_dir(job)
    dst.mkdir(parents=True, exist_ok=True)
    for f in ARCHIVED:
        shutil.copy2(src / f, dst / f)
    if ev.is_file():
        layout.eval_out(job.name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ev, layout.eval_out(job.name))
    _merge_times(archive / "times.json", layout.times, _time_keys(job.name))
    return True


def train_job(doc: dict, job: S.Job, layout: S.Layout, run, archive: Path | None = None, evaluate: bool = True) -> bool:
    """Train (or resume, or skip, or restore from `archive`) one run; True when it is finished."""

    rdir, steps = layout.run_dir(job), int(doc["train"]["steps"])
    if archive is not None and run_state(rdir, steps) != "done" and not run.dry and restore_result(doc, job, layout, archive, evaluate):
        run.say(f"train/{job.name}: restored from {archive} (metrics{' and evaluation' if evaluate else ''}; no weights)")
        return True
    if (rdir / "config.yaml").is_file():
        check_run_config(doc, job, layout, rdir)
    state = run_state(rdir, steps)
    if state == "done":
        run.say(f"train/{job.name}: finished, skipped")
        return True
    if run.dry:
        print(f"# train/{job.name}: {state}")
    cmd = S.resume_command(job, layout) if state == "resume" else S.train_command(doc, job, layout)
    rc = run(f"train/{job.name}", cmd)
    if run.dry:
        return True
    if rc != 0 or run_state(rdir, steps) != "done":
        run.say(f"train/{job.name}: not finished (exit {rc}); see {layout.log('train-' + job.name)}; "
                    "run the same command again to resume")
        return False
    return True


def eval_job(doc: dict, name: str, model: str, data: list[Path], layout: S.Layout, run, **kw) -> bool:
    out = layout.eval_out(name)
    if out.exists():
        run.say(f"eval/{name}: done, skipped")
        return True
    if run.dry:
        print(f"# eval/{name}")
    rc = run(f"eval/{name}", S.eval_command(doc, model, data, out, **kw))
    return run.dry or (rc == 0 and out.exists())


def run_study(doc: dict, layout: S.Layout, run, arm_ids, seeds, *, evaluate: bool, keep_checkpoints: bool,
              archive: Path | None = None) -> bool:
    for w in prepare(doc, layout, eval_sets=evaluate, dry=run.dry):
        run.say(f"WARNING: {w}")
    data = [layout.eval_data(k) for k in S.EVAL_SETS]
    keep = archive is not None and not run.dry
    if evaluate:
        base_arch = archive / "eval" / "base.json" if archive is not None else None
        if keep and base_arch.is_file() and not layout.eval_out("base").exists():
            layout.eval_out("base").parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(base_arch, layout.eval_out("base"))
        if not eval_job(doc, "base", doc["train"]["model"], data, layout, run):
            return False
        if keep:
            archive_result(layout, archive, "base", None)
    for job in S.jobs(doc, arm_ids, seeds):
        if run.stop or not train_job(doc, job, layout, run, archive, evaluate):
            return False
        if evaluate:
            if not eval_job(doc, job.name, str(layout.run_dir(job) / "final"), data, layout, run):
                return False
            if not keep_checkpoints and not run.dry:
                shutil.rmtree(layout.run_dir(job) / "checkpoints", ignore_errors=True)  # final/ stays
        if keep:
            archive_result(layout, archive, job.name, layout.run_dir(job))
    return True


def run_pilot(doc: dict, layout: S.Layout, run, names, arm_ids, keep_checkpoints: bool, seeds=None,
              archive: Path | None = None) -> bool:
    """Each candidate: the base model on its training questions, then GRPO on every pilot seed. With
    `archive`, each finished job's small results go to archive/pilot/CANDIDATE/ (`summarize.py --pilot
    --out archive` reads them there)."""
    p = doc["pilot"]
    unknown = set(names) - {c["name"] for c in p["candidates"]}
    if unknown:
        raise S.StudyError(f"no pilot candidate {sorted(unknown)}")
    for cand in p["candidates"]:
        if names and cand["name"] not in names:
            continue
        cdoc, run.layout = S.pilot_study(doc, cand), S.Layout(layout.out / "pilot" / cand["name"])
        prepare(cdoc, run.layout, eval_sets=False, dry=run.dry)
        n = int(p["base_samples"])
        if not eval_job(cdoc, "base-train", cdoc["train"]["model"], [run.layout.data("Q")], run.layout, run, samples=n,
                        ks=sorted({1, min(4, n), n})):
            return False
        keep = archive / "pilot" / cand["name"] if archive is not None and not run.dry else None
        if keep is not None:
            archive_result(run.layout, keep, "base-train", None)
        for job in S.jobs(cdoc, arm_ids or p["arms"], seeds or S.pilot_seeds(doc)):
            if run.stop or not train_job(cdoc, job, run.layout, run):
                return False
            if not keep_checkpoints and not run.dry:
                shutil.rmtree(run.layout.run_dir(job) / "checkpoints", ignore_errors=True)
            if keep is not None:
                archive_result(run.layout, keep, job.name, run.layout.run_dir(job))
    run.layout = layout
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("runs/evidence2"))
    ap.add_argument("--study", type=Path, default=S.STUDY_FILE, help="study file (default: study.yaml here)")
    ap.add_argument("--arms", default="", help="comma-separated arm ids (default: all; with --pilot: pilot.arms)")
    ap.add_argument("--seeds", default="", help="comma-separated seeds (default: study.seeds; with --pilot: pilot.seeds)")
    ap.add_argument("--pilot", action="store_true", help="run the pilot candidates instead of the study")
    ap.add_argument("--candidates", default="", help="with --pilot: comma-separated candidate names (default: all)")
    ap.add_argument("--no-eval", action="store_true", help="train only (no held-out sets, no pass@k)")
    ap.add_argument("--keep-checkpoints", action="store_true", help="keep checkpoints/ of finished runs (default: removed)")
    ap.add_argument("--dry-run", action="store_true", help="print what would run (state and commands); run and write nothing")
    ap.add_argument("--archive", type=Path, default=None,
                    help="copy finished runs' metrics/config and eval JSON here, and restore them from here (commit it)")
    args = ap.parse_args(argv)
    doc = S.load_study(args.study)
    arm_ids = [int(x) for x in args.arms.split(",") if x.strip()] or None
    seeds = [int(x) for x in args.seeds.split(",") if x.strip()] or None
    if seeds and not args.pilot and not set(seeds) <= set(doc["study"]["seeds"]):
        ap.error(f"--seeds {seeds}: add them to study.seeds first (eval sets and pairing are planned for those)")
    layout = S.Layout(args.out.resolve())
    run = Runner(layout, args.dry_run)
    old = {} if args.dry_run else run.install()
    try:
        if args.pilot:
            names = [x for x in args.candidates.split(",") if x.strip()]
            ok = run_pilot(doc, layout, run, names, arm_ids, args.keep_checkpoints, seeds,
                           archive=args.archive.resolve() if args.archive else None)
        else:
            ok = run_study(doc, layout, run, arm_ids, seeds, evaluate=not args.no_eval, keep_checkpoints=args.keep_checkpoints,
                           archive=args.archive.resolve() if args.archive else None)
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)
    run.say("done" if ok else "stopped; run the same command again to continue")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
