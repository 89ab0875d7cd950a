"""The Evidence 2 study driver (benchmarks/evidence2, issue 14): the study file, the commands the
driver runs, resumability on fake run directories (no training), the statistics against slow
loop versions, the summary on synthetic runs, and one 2-step end-to-end run of a tiny model."""

from __future__ import annotations

import copy
import importlib.util
import json
import math
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

E2 = Path(__file__).resolve().parents[1] / "benchmarks" / "evidence2"
sys.path.insert(0, str(E2))
import stats as T
import study as S


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"evidence2_{name}", E2 / f"{name}.py")
    spec.loader.exec_module(mod := importlib.util.module_from_spec(spec))
    return mod


RUN, SUM = _load("run"), _load("summarize")


@pytest.fixture(scope="module")
def doc():
    return S.load_study()


# --- the study file ------------------------------------------------------------------------
def test_study_has_the_six_arms_with_their_algorithms(doc, tmp_path):
    from tagrpo.train.config import load_config

    assert [a.id for a in S.arms(doc)] == [1, 2, 3, 4, 5, 6]
    assert len(doc["study"]["seeds"]) >= 3 and doc["pilot"]["candidates"] and doc["study"]["validity"]["min"] == 0.5
    layout = S.Layout(tmp_path)
    layout.train_yaml.write_text(yaml.safe_dump(doc["train"]))
    cfgs = {}
    for job in S.jobs(doc, seeds=[0]):
        sets = [f"{k}={S.fmt_value(v)}" for k, v in S.run_settings(doc, job, layout).items() if k not in doc["train"] or k in job.arm.set]
        cfgs[job.arm.id] = load_config(layout.train_yaml, sets)  # validates, as `tagrpo train` does
    want = {1: ("grpo", 4, "Q"), 2: ("grpo", 4, "scaled"), 3: ("grpo-matched", 16, "Q"), 4: ("ta-grpo", 16, "Q"),
            5: ("ta-grpo-separate", 16, "Q"), 6: ("ta-grpo", 16, "Q")}
    for i, (alg, family, data) in want.items():
        c = cfgs[i]
        assert (c.algorithm, c.family_size, c.samples_per_variant) == (alg, family, 4), i
        assert Path(c.train_data).name == f"train-{data}.jsonl" and c.seed == 0
    assert {cfgs[i].neighbors for i in (4, 5)} == {"generator"} and cfgs[6].neighbors == "rules"
    assert all(cfgs[i].num_neighbors == 3 for i in (3, 4, 5, 6))
    assert len({c.steps for c in cfgs.values()}) == 1 and len({c.lr for c in cfgs.values()}) == 1
    # same seed and same question file = same data order (the trainer's epoch_order(seed, epoch, n))
    assert len({(c.seed, c.train_data) for i, c in cfgs.items() if i != 2}) == 1


@pytest.mark.parametrize(("section", "key", "value", "match"), [
    ("train", "seed", 3, "per run"), ("study", "difficulty_mix", {1: 0.5, 2: 0.4}, "sum to 1"),
    ("compare", "pairs", [[4, 9]], "does not exist"), ("eval", "samples", 8, "every k")])
def test_study_file_errors_are_named(doc, section, key, value, match):
    bad = copy.deepcopy(doc)
    bad[section][key] = value
    with pytest.raises(S.StudyError, match=match):
        S.check_study(bad)


def test_training_rows_and_eval_sets(doc, tmp_path):
    from tagrpo.data.arith_eval import math_key
    from tagrpo.data.io import read_rows

    rows = S.training_rows(doc)
    q, big = rows["Q"], rows["scaled"]
    assert len(q) == doc["study"]["questions"] and len(big) == round(doc["study"]["scale"] * len(q))
    assert {r["id"] for r in q} <= {r["id"] for r in big}
    assert len({math_key(r["structure"]) for r in big}) == len(big)  # distinct arithmetic
    assert S.training_rows(doc) == rows  # deterministic
    assert S.split_counts(7, {1: 0.5, 2: 0.5}) in ({1: 4, 2: 3}, {1: 3, 2: 4}) and sum(S.split_counts(120, {1: 0.3, 2: 0.7}).values()) == 120
    layout = S.Layout(tmp_path)
    assert RUN.prepare(doc, layout, eval_sets=True, dry=False) == []  # no warning: rules find N neighbors
    train_keys = {math_key(r["structure"]) for r in big}
    for kind in S.EVAL_SETS:
        ev = read_rows(layout.eval_data(kind))
        assert len(ev) == doc["eval"]["questions"] and not {math_key(r["structure"]) for r in ev} & train_keys
    changed = copy.deepcopy(doc)
    changed["train"]["lr"] = 1.0
    with pytest.raises(S.StudyError, match="other settings"):
        RUN.prepare(changed, layout, eval_sets=True, dry=False)


# --- the driver ----------------------------------------------------------------------------
def test_dry_run_prints_the_commands_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    assert RUN.main(["--out", str(out), "--dry-run", "--arms", "1,4", "--seeds", "0"]) == 0
    text = capsys.readouterr().out
    assert not out.exists()
    train = [ln for ln in text.splitlines() if " train " in ln]
    assert len(train) == 2 and all(ln.split()[0].endswith("tagrpo") for ln in train)
    assert "--set algorithm=grpo " in train[0] and f"output_dir={out}/runs/a1-grpo-s0" in train[0]
    assert "--set algorithm=ta-grpo --set neighbors=generator" in train[1] and "seed=0" in train[1]
    assert all(f"train_data={out}/data/train-Q.jsonl" in ln and f"--config {out}/train.yaml" in ln for ln in train)
    evals = [ln for ln in text.splitlines() if " eval --model" in ln]
    assert [ln.split("--model ")[1].split()[0] for ln in evals] == ["smollm2-135m-instruct", f"{out}/runs/a1-grpo-s0/final",
                                                                   f"{out}/runs/a4-ta-grpo-s0/final"]
    assert all("--n 16 --k 1,4,16" in ln and "arith-heldout-form.jsonl" in ln and "arith-harder.jsonl" in ln for ln in evals)
    assert "train/a1-grpo-s0: fresh" in text
    assert RUN.main(["--out", str(out), "--dry-run", "--pilot", "--candidates", "d1-lr3e-5"]) == 0
    text = capsys.readouterr().out
    assert f"{out}/pilot/d1-lr3e-5/runs/a1-grpo-s0" in text and "--n 8 --k 1,4,8" in text


def _fake_run(doc, layout, job, *, steps: int, final: bool, ckpt: int | None = None, settings=None):
    rdir = layout.run_dir(job)
    rdir.mkdir(parents=True)
    (rdir / "config.yaml").write_text(yaml.safe_dump(settings or S.run_settings(doc, job, layout)))
    (rdir / "metrics.jsonl").write_text("".join(json.dumps({"step": i + 1}) + "\n" for i in range(steps)) + '{"step": 9')
    if final:
        (rdir / "final").mkdir()
        (rdir / "final" / "config.json").write_text("{}")
    if ckpt:
        c = rdir / "checkpoints" / f"step-{ckpt}"
        c.mkdir(parents=True)
        (c / "COMPLETE").write_text("ok\n")
        (c / "trainer_state.json").write_text(json.dumps({"step": ckpt}))


def test_finished_runs_are_skipped_and_killed_ones_resume(doc, tmp_path, capsys):
    out = tmp_path / "out"
    layout = S.Layout(out.resolve())
    steps = doc["train"]["steps"]
    j1, j4, j3 = (S.Job(next(a for a in S.arms(doc) if a.id == i), 0) for i in (1, 4, 3))
    _fake_run(doc, layout, j1, steps=steps, final=True)
    _fake_run(doc, layout, j4, steps=12, final=False, ckpt=12)
    _fake_run(doc, layout, j3, steps=3, final=False)  # killed before its first checkpoint: starts again
    (out / "eval").mkdir()
    (out / "eval" / "a1-grpo-s0.json").write_text("{}")
    assert RUN.run_state(layout.run_dir(j1), steps) == "done"
    assert RUN.run_state(layout.run_dir(j1), steps + 1) != "done"  # a step missing: not finished
    assert RUN.main(["--out", str(out), "--dry-run", "--arms", "1,3,4", "--seeds", "0"]) == 0
    text = capsys.readouterr().out
    assert "train/a1-grpo-s0: finished, skipped" in text and "eval/a1-grpo-s0: done, skipped" in text
    assert f"output_dir={out}/runs/a1-grpo-s0" not in text
    assert f"tagrpo train --resume {layout.run_dir(j4)}" in text and "train/a4-ta-grpo-s0: resume" in text
    assert "train/a3-grpo-matched-s0: fresh" in text and "algorithm=grpo-matched" in text
    bad = {**S.run_settings(doc, j1, layout), "lr": 1.0}
    (layout.run_dir(j1) / "config.yaml").write_text(yaml.safe_dump(bad))
    with pytest.raises(S.StudyError, match="lr: run has 1.0"):
        RUN.main(["--out", str(out), "--dry-run", "--arms", "1", "--seeds", "0"])


def test_a_finished_study_runs_no_job(doc, tmp_path, monkeypatch):
    out = tmp_path / "out"
    layout = S.Layout(out.resolve())
    for job in S.jobs(doc, [1, 2], [0]):
        _fake_run(doc, layout, job, steps=doc["train"]["steps"], final=True, ckpt=doc["train"]["steps"])
        layout.eval_out(job.name).parent.mkdir(parents=True, exist_ok=True)
        layout.eval_out(job.name).write_text("{}")
    layout.eval_out("base").write_text("{}")
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: pytest.fail(f"a job was started: {a}"))
    assert RUN.main(["--out", str(out), "--arms", "1,2", "--seeds", "0"]) == 0
    r1 = layout.run_dir(S.jobs(doc, [1], [0])[0])
    assert not (r1 / "checkpoints").exists() and (r1 / "final" / "config.json").exists()  # pruned; final/ stays
    assert "done" in (out / "logs" / "driver.log").read_text()


# --- statistics against slow references ------------------------------------------------------
def _quantile_ref(xs, p):
    xs = sorted(xs)
    h = (len(xs) - 1) * p
    lo = math.floor(h)
    return xs[lo] + (h - lo) * (xs[min(lo + 1, len(xs) - 1)] - xs[lo])


def _bootstrap_ref(d, n_boot, rng_seed, level):
    s, q = len(d), len(d[0])
    si, qi = T.bootstrap_draws(s, q, n_boot, rng_seed)
    means = []
    for b in range(n_boot):
        vals = [d[i][j] for i in si[b] for j in qi[b]]
        means.append(sum(vals) / len(vals))
    mean = sum(sum(r) for r in d) / (s * q)
    return mean, _quantile_ref(means, (1 - level) / 2), _quantile_ref(means, 1 - (1 - level) / 2)


@pytest.mark.parametrize("shape", [(3, 16), (5, 7), (1, 9)])
def test_bootstrap_matches_the_loop(shape):
    rng = np.random.default_rng(shape[0] * 100 + shape[1])
    d = rng.normal(0.1, 0.3, size=shape)
    got = T.bootstrap_ci(d, 300, 7, 0.95)
    ref = _bootstrap_ref(d.tolist(), 300, 7, 0.95)
    assert np.allclose(got, ref, atol=1e-12)
    assert got == T.bootstrap_ci(d, 300, 7, 0.95)  # fixed RNG seed: reproducible
    assert got[1] <= got[0] <= got[2]


def test_paired_t_matches_the_formula():
    t975 = {2: 4.302652729911275, 4: 2.7764451051977987}  # Student t quantiles (tables)
    for x in ([0.1, 0.3, 0.2], [0.05, -0.02, 0.11, 0.0, 0.07]):
        n = len(x)
        m = sum(x) / n
        sd = math.sqrt(sum((v - m) ** 2 for v in x) / (n - 1))
        half = t975[n - 1] * sd / math.sqrt(n)
        assert np.allclose(T.paired_t_ci(x, 0.95), (m, m - half, m + half), atol=1e-9)
    assert T.paired_t_ci([0.2]) == (0.2, None, None)


def test_pass_at_k_late_mean_and_verdict():
    for n, k in ((16, 1), (16, 4), (16, 16), (5, 3)):
        cs = list(range(n + 1))
        ref = [1 - math.comb(n - c, k) / math.comb(n, k) for c in cs]
        assert np.allclose(T.pass_at_k_per_question(n, cs, k), ref)
    vals = [0.0, 1.0, None, float("nan"), 0.5, 0.7]
    assert T.late_mean(vals, 0.5) == pytest.approx((0.5 + 0.7) / 2)  # last 3 entries, NaN skipped
    assert T.late_mean(vals, 1.0) == pytest.approx((0 + 1 + 0.5 + 0.7) / 4) and T.late_mean([], 0.5) is None
    assert T.verdict((0.01, 0.2), (0.001, 0.3)) == "resolved" and T.verdict((-0.2, -0.01)) == "resolved"
    assert T.verdict((0.01, 0.2), (-0.1, 0.3)) == "not resolved" and T.verdict((None, None)) == "not resolved"


# --- the summary on synthetic runs -----------------------------------------------------------
def _eval_doc(p_correct, n, rng, ids, ks=(1, 4, 16)):
    bench = {}
    for kind in S.EVAL_SETS:
        qs = [{"id": i, "n_correct": int(rng.binomial(n, p_correct)), "samples": [{}] * n} for i in ids]
        passk = {str(k): float(np.mean(T.pass_at_k_per_question(n, [q["n_correct"] for q in qs], k))) for k in ks}
        bench[f"arith-{kind}"] = {"questions": qs, "pass@k": passk, "diversity": 0.2}
    return {"models": [{"name": "m", "benchmarks": bench}]}


def test_summarize_on_synthetic_runs(doc, tmp_path):
    out, dest = tmp_path / "out", tmp_path / "dest"
    layout = S.Layout(out.resolve())
    rng = np.random.default_rng(0)
    ids = [f"q{i}" for i in range(20)]
    p_eval = {1: 0.2, 2: 0.25, 3: 0.3, 4: 0.7, 5: 0.7, 6: 0.5}
    study = tmp_path / "study.yaml"  # the real study with 10 training steps
    raw = yaml.safe_load(S.STUDY_FILE.read_text())
    raw["train"]["steps"] = 10
    study.write_text(yaml.safe_dump(raw))
    killed = "a6-ta-grpo-rules-s2"  # stopped after 7 of 10 steps, never evaluated: listed, not counted
    for job in S.jobs(doc):
        (rdir := layout.run_dir(job)).mkdir(parents=True)
        lines = []
        for t in range(1, 8 if job.name == killed else 11):  # 10 steps
            ac = 0.1 * t if job.arm.id in (1, 2) else 0.05 * t
            lines.append({"step": t, "uniform/q0": ac + 0.05, "uniform/q0_all_correct": ac, "uniform/q0_all_wrong": 0.05,
                          "uniform/family": ac / 2, "uniform/family_all_correct": ac / 2, "uniform/family_all_wrong": 0.0,
                          "reward/mean": 0.5, "reward/variant_0/mean": 0.5 + 0.01 * job.seed, "actor/entropy": float("nan") if t == 10 else 0.4,
                          "time/step": 2.0, "time/generate": 1.0, "time/train": 1.0, "perf/sampled_tokens": 100.0 * t,
                          "actor/grad_norm": float(t), "response/length_mean": 30.0,
                          **({"train/logp_anchored": -1.0 - 0.1 * t} if job.arm.id == 4 else {}),
                          **({"diversity/mean_pairwise_distance": 0.3} if t % 4 == 0 else {})})
        (rdir / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in lines))
        if job.name == killed:
            continue
        layout.eval_out(job.name).parent.mkdir(parents=True, exist_ok=True)
        layout.eval_out(job.name).write_text(json.dumps(_eval_doc(p_eval[job.arm.id], 16, rng, ids)))
    layout.eval_out("base").write_text(json.dumps(_eval_doc(0.1, 16, rng, ids)))
    layout.times.write_text(json.dumps({"train/a1-grpo-s0": [{"seconds": 30.0}, {"seconds": 12.0}]}))
    assert SUM.main(["--out", str(out), "--dest", str(dest), "--study", str(study), "--no-report"]) == 0
    md = (dest / "summary.md").read_text()
    assert "**Validity (VALID)**" in md  # arm 1's late q0 all-correct: mean of 0.6..1.0 = 0.8
    for a in S.arms(doc):
        assert f"| {a.id} {a.name} | {2 if a.id == 6 else 3} |" in md  # train and eval tables
    assert f"Not counted (training not finished): {killed} (7 of 10 steps)." in md
    assert json.loads((dest / "summary.json").read_text())["partial"] == {killed: 7}
    assert "| base model | 1 |" in md and "train-form p@16" in md
    rows = {(r["pair"], r["metric"]): r for r in json.loads((dest / "summary.json").read_text())["differences"]}
    big = rows[("4 ta-grpo − 1 grpo", "heldout-form pass@1")]
    assert big["verdict"] == "resolved" and big["mean"] > 0.3 and big["seeds"] == 3
    same = rows[("4 ta-grpo − 5 ta-grpo-separate", "train-form pass@1")]
    assert same["verdict"] == "not resolved" and same["boot"][0] < 0 < same["boot"][1]
    assert rows[("4 ta-grpo − 1 grpo", "late q0_all_correct")]["boot"] is None
    s = json.loads((dest / "summary.json").read_text())["runs"]["a1-grpo-s0"]
    assert s["wall_s"] == 42.0 and s["train"]["train_s"] == 20.0 and s["train"]["sampled_tokens"] == 1000
    assert s["train"]["late_entropy"] == pytest.approx(0.4) and s["train"]["late_diversity"] == pytest.approx(0.3)
    assert s["train"]["late_grad_norm"] == pytest.approx(8.0) and s["train"]["late_logp_anchored"] is None  # steps 6-10
    a4 = json.loads((dest / "summary.json").read_text())["runs"]["a4-ta-grpo-s0"]["train"]
    assert a4["late_logp_anchored"] == pytest.approx(-1.8) and a4["late_length"] == pytest.approx(30.0)
    assert "| logp on-policy | logp anchored |" in md
    brief = subprocess.run([sys.executable, str(E2 / "brief.py"), str(dest / "summary.json")], capture_output=True, text=True)
    assert brief.returncode == 0, brief.stderr
    b = brief.stdout  # RESULTS.md's tables: per-seed values after each mean, key differences on pass@1 / pass@16 only
    p1 = [r["eval"]["heldout-form"]["pass@k"]["1"] for r in sorted(json.loads((dest / "summary.json").read_text())["runs"].values(),
                                                                 key=lambda r: r["seed"]) if r["arm"] == 4]
    assert "| 4 ta-grpo (generator) | 0,1,2 | " in b and " / ".join(f"{v:.2f}" for v in p1) in b
    assert "| 6 ta-grpo (rules) | 0,1 |" in b  # the killed seed-2 run: neither trained nor evaluated in full
    assert f"| 4 ta-grpo − 1 grpo | heldout-form pass@1 | 3 | {big['mean']:+.3f} |" in b and "pass@4" not in b
    doc_md = tmp_path / "RESULTS.md"  # --into: the marked block replaced in place, the rest kept
    doc_md.write_text("# R\n\nbefore\n<!-- brief.py: the command -->\nold table\n<!-- /brief.py -->\nafter\n")
    into = subprocess.run([sys.executable, str(E2 / "brief.py"), str(dest / "summary.json"), "--into", str(doc_md)],
                          capture_output=True, text=True)
    assert into.returncode == 0, into.stderr
    assert doc_md.read_text() == f"# R\n\nbefore\n<!-- brief.py: the command -->\n{b.rstrip(chr(10))}\n<!-- /brief.py -->\nafter\n"
    two = "<!-- brief.py: first -->\nold 1\n<!-- /brief.py -->\n<!-- brief.py regime-2: second -->\nold 2\n<!-- /brief.py regime-2 -->\n"
    doc_md.write_text(two)  # --block: two studies' tables in one file, each replaced on its own
    named = subprocess.run([sys.executable, str(E2 / "brief.py"), str(dest / "summary.json"), "--into", str(doc_md),
                            "--block", "regime-2"], capture_output=True, text=True)
    assert named.returncode == 0, named.stderr
    assert doc_md.read_text() == two.replace("old 2", b.rstrip(chr(10)))
    assert subprocess.run([sys.executable, str(E2 / "brief.py"), str(dest / "summary.json"), "--into", str(doc_md)],
                          capture_output=True, text=True).returncode == 0
    assert doc_md.read_text() == two.replace("old 1", b.rstrip(chr(10))).replace("old 2", b.rstrip(chr(10)))
    doc_md.write_text("no markers\n")
    bad = subprocess.run([sys.executable, str(E2 / "brief.py"), str(dest / "summary.json"), "--into", str(doc_md)],
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "RESULTS.md: needs exactly one '<!-- brief.py" in bad.stderr
    assert doc_md.read_text() == "no markers\n"
    assert SUM.main(["--out", str(out), "--dest", str(dest), "--study", str(study), "--pilot"]) == 0  # no pilot runs: a table of dashes
    assert "d1-lr1e-5" in (dest / "pilot.md").read_text()


@pytest.mark.slow
def test_tiny_end_to_end(doc, tmp_path):
    """Arm 4 (generator neighbors) trained 2 steps and evaluated, a re-run that does nothing, the
    summary; the base eval is pre-written (a `tagrpo eval` process costs ~15 s, mostly imports)."""
    from tagrpo.models import save_tiny_model
    model, small = save_tiny_model(tmp_path / "tiny", seed=0), copy.deepcopy(doc)
    small["study"].update(questions=4, scale=2.5, difficulty_mix={2: 1.0}, seeds=[0])
    small["train"].update(model=model, steps=2, questions_per_step=2, samples_per_variant=2, num_neighbors=2,
                          max_new_tokens=8, autocast="none", micro_batch_tokens=512, generate_batch_size=16,
                          diversity_every=0, save_every=1, lr=1e-3)
    small["eval"].update(questions=3, samples=2, ks=[1, 2], dtype="fp32", batch_size=16, diversity=False)
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(small))
    (out := tmp_path / "out").joinpath("eval").mkdir(parents=True)
    (out / "eval" / "base.json").write_text(json.dumps(_eval_doc(0.0, 2, np.random.default_rng(0), ["x"], ks=(1, 2))))
    cmd = [sys.executable, str(E2 / "run.py"), "--study", str(tmp_path / "study.yaml"), "--out", str(out), "--arms", "4"]
    r = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:] + "".join(p.read_text() for p in out.glob("logs/*.log"))[-3000:]
    rdir = out / "runs" / "a4-ta-grpo-s0"
    assert (rdir / "final" / "config.json").exists() and not (rdir / "checkpoints").exists()
    assert [json.loads(x)["step"] for x in (rdir / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    assert yaml.safe_load((rdir / "config.yaml").read_text())["neighbors"] == "generator"
    r2 = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=120)
    assert r2.returncode == 0 and "finished, skipped" in r2.stdout and " exit " not in r2.stdout
    assert SUM.main(["--out", str(out), "--dest", str(tmp_path / "dest"), "--study", str(tmp_path / "study.yaml"), "--no-report"]) == 0
    assert "| 4 ta-grpo | 1 |" in (tmp_path / "dest" / "summary.md").read_text()


def test_pilot_candidate_steps_override_the_pilot_default():
    doc = S.load_study()
    study_steps = doc["train"]["steps"]
    base = {"name": "x", "set": {"lr": 1e-5}}
    assert S.pilot_study(doc, base)["train"]["steps"] == doc["pilot"]["steps"]
    longer = S.pilot_study(doc, {**base, "steps": 96})
    assert longer["train"]["steps"] == 96 and longer["train"]["lr"] == 1e-5
    assert doc["train"]["steps"] == study_steps  # the study itself is not changed


def test_archived_results_are_restored_into_a_fresh_out_without_running(doc, tmp_path, monkeypatch):
    """Session A finishes runs with --archive; session B (new machine: a fresh OUT, the archive
    committed) restores them and starts no job; an archived run with other settings is refused."""
    arch = tmp_path / "archive"
    a = S.Layout((tmp_path / "a").resolve())
    jobs = S.jobs(doc, [1, 2], [0])
    for job in jobs:
        _fake_run(doc, a, job, steps=doc["train"]["steps"], final=True)
        a.eval_out(job.name).parent.mkdir(parents=True, exist_ok=True)
        a.eval_out(job.name).write_text(json.dumps({"job": job.name}))
    a.eval_out("base").write_text(json.dumps({"job": "base"}))
    seg = {f"train/{jobs[0].name}": [{"start": 0.0, "seconds": 12.5, "rc": 0}, {"start": 20.0, "seconds": 7.5, "rc": 0}],
           f"eval/{jobs[0].name}": [{"start": 40.0, "seconds": 3.0, "rc": 0}]}
    a.times.write_text(json.dumps({**seg, "train/other-run": [{"start": 1.0, "seconds": 99.0, "rc": 1}]}))
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: pytest.fail(f"a job was started: {a}"))
    assert RUN.main(["--out", str(a.out), "--arms", "1,2", "--seeds", "0", "--archive", str(arch)]) == 0
    assert json.loads((arch / "times.json").read_text()) == seg  # the finished jobs' wall time, nothing else
    assert sorted(p.name for p in (arch / "runs").iterdir()) == sorted(j.name for j in jobs)
    assert not (arch / "runs" / jobs[0].name / "final").exists()  # no weights in the archive
    b = S.Layout((tmp_path / "b").resolve())
    assert RUN.main(["--out", str(b.out), "--arms", "1,2", "--seeds", "0", "--archive", str(arch)]) == 0
    for job in jobs:
        assert RUN.metrics_steps(b.run_dir(job)) == doc["train"]["steps"]
        assert json.loads(b.eval_out(job.name).read_text()) == {"job": job.name}
    assert json.loads(b.eval_out("base").read_text()) == {"job": "base"}
    assert "restored from" in (b.out / "logs" / "driver.log").read_text()
    assert json.loads(b.times.read_text()) == seg  # summarize's "wall s" survives the move
    for name in [j.name for j in jobs] + ["base"]:
        b.eval_out(name).unlink()  # placeholders, not evaluation documents
    assert SUM.collect(doc, b)["runs"][jobs[0].name]["wall_s"] == 20.0
    bad = {**S.run_settings(doc, jobs[0], a), "lr": 1.0}
    (arch / "runs" / jobs[0].name / "config.yaml").write_text(yaml.safe_dump(bad))
    c = tmp_path / "c"
    with pytest.raises(S.StudyError, match="lr: run has 1.0"):
        RUN.main(["--out", str(c), "--arms", "1", "--seeds", "0", "--archive", str(arch)])


def test_regime_2_changes_the_prompt_and_warmup_and_pilots_every_seed(doc, tmp_path, capsys):
    """study-v2.yaml (regime 2) is the first study with two changes, the prompt template (which both
    training and the held-out evaluation use) and the warm-up; its pilot trains GRPO on every listed
    seed; the prompt's worked example is no problem the generator can make."""
    from tagrpo.data.arith import ITEMS, NAMES
    from tagrpo.train.config import load_config

    v2 = S.load_study(E2 / "study-v2.yaml")
    tpl = v2["train"].pop("prompt_template")
    assert "The answer is" in tpl and tpl.count("{question}") == 1
    assert "Kai" not in NAMES and "pens" not in ITEMS and "Kai has 12 pens" in tpl
    assert (v2["train"].pop("warmup_ratio"), doc["train"].get("warmup_ratio")) == (0.1, 0.0)
    assert v2["train"] == {k: v for k, v in doc["train"].items() if k != "warmup_ratio"}
    assert v2["arms"] == doc["arms"] and v2["eval"] == doc["eval"]
    assert v2["study"] == doc["study"]
    # the comparisons too, plus the exploratory pairs of sessions 25 (matched GRPO minus GRPO) and 26
    # (TA-GRPO without joint normalization minus matched GRPO)
    pairs = v2["compare"].pop("pairs")
    assert pairs == doc["compare"]["pairs"] + [[3, 1], [5, 3]] and v2["compare"] == {k: v for k, v in doc["compare"].items() if k != "pairs"}
    assert S.pilot_seeds(v2) == [0, 1, 2] and S.pilot_seeds(doc) == [doc["pilot"]["seed"]]
    out = tmp_path / "out"
    assert RUN.main(["--study", str(E2 / "study-v2.yaml"), "--out", str(out), "--dry-run", "--pilot"]) == 0
    text = capsys.readouterr().out
    cands = [c["name"] for c in v2["pilot"]["candidates"]]
    trains = [ln for ln in text.splitlines() if " train --config" in ln]
    assert [ln.split("seed=")[1].split()[0] for ln in trains] == ["0", "1", "2"] * len(cands)
    assert all(f"{out}/pilot/{c}/runs/a1-grpo-s" in ln for c, ln in zip(sorted(cands * 3, key=cands.index), trains))
    evals = [ln for ln in text.splitlines() if " eval --model" in ln]
    tpls = [S.pilot_study(v2, c)["train"]["prompt_template"] for c in v2["pilot"]["candidates"]]
    assert tpls[-1] == tpl and "Example" not in tpls[0]  # each candidate's own prompt (the last one chosen)
    # (a prompt with newlines spans lines of the printed command: compare its first line)
    assert len(evals) == len(cands) and all(f"--template {shlex.quote(t)}".split("\n")[0] in ln for t, ln in zip(tpls, evals))
    assert RUN.main(["--study", str(E2 / "study-v2.yaml"), "--out", str(out), "--dry-run", "--pilot", "--seeds", "2",
                     "--candidates", cands[0]]) == 0
    trains = [ln for ln in capsys.readouterr().out.splitlines() if " train --config" in ln]
    assert len(trains) == 1 and "seed=2" in trains[0]
    layout = S.Layout(tmp_path)
    v2 = S.load_study(E2 / "study-v2.yaml")  # unpopped: the train section as the driver writes it
    layout.train_yaml.write_text(yaml.safe_dump(v2["train"]))
    (job,) = S.jobs(v2, [1], [0])
    cfg = load_config(layout.train_yaml, [f"{k}={S.fmt_value(v)}" for k, v in S.run_settings(v2, job, layout).items()
                                          if k in ("output_dir", "seed", "train_data")])
    assert cfg.prompt_template == tpl and cfg.warmup_ratio == 0.1  # the trainer samples with the new prompt
    assert cfg.prompt_template.replace("{question}", "Q?").startswith("Example: Kai has 12 pens.")


def test_report_writes_the_figures_results_md_links(doc, tmp_path, capsys):
    """summarize's report step runs `tagrpo report` per seed and copies its uniform-fraction and diversity
    plots to DEST/figures/<plot>-s<seed>.png (the files RESULTS.md links), the full report kept apart."""
    layout, dest, rep = S.Layout(tmp_path / "out"), tmp_path / "dest", tmp_path / "rep"
    for job in S.jobs(doc, [1, 4], [0]):
        (rdir := layout.run_dir(job)).mkdir(parents=True)
        rows = [{"step": t, "uniform/q0": 0.1 * t, "uniform/q0_all_correct": 0.1 * t, "uniform/q0_all_wrong": 0.0,
                 "reward/mean": 0.5, "diversity/mean_pairwise_distance": 0.3 - 0.02 * t} for t in range(1, 6)]
        (rdir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    SUM.write_report(doc, layout, dest, [0, 1], rep)
    assert sorted(p.name for p in (dest / "figures").iterdir()) == ["diversity-s0.png", "uniform-s0.png"]
    assert (dest / "figures" / "uniform-s0.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (rep / "report-s0" / "index.html").exists() and not (dest / "report-s0").exists()
    assert "no run of seed 1 has metrics yet" in capsys.readouterr().err


def test_pilot_archive_keeps_every_seed_and_summarize_reads_it(tmp_path, monkeypatch):
    """`run.py --pilot --archive A` copies each pilot run's metrics/config and the base eval to
    A/pilot/CANDIDATE/, and `summarize.py --pilot --out A` makes the table from them (a fresh clone
    has only the archive)."""
    v2 = S.load_study(E2 / "study-v2.yaml")
    cand = v2["pilot"]["candidates"][0]
    cdoc = S.pilot_study(v2, cand)
    out, arch = tmp_path / "out", tmp_path / "arch"
    layout = S.Layout((out / "pilot" / cand["name"]).resolve())
    steps = cdoc["train"]["steps"]
    for job in S.jobs(cdoc, [1], S.pilot_seeds(v2)):
        rdir = layout.run_dir(job)
        _fake_run(cdoc, layout, job, steps=0, final=True)
        ac = 0.9 if job.seed != 2 else 0.0  # seed 2 never all-correct
        (rdir / "metrics.jsonl").write_text("".join(json.dumps({"step": t, "uniform/q0_all_correct": ac, "uniform/q0_all_wrong": 0.0,
                                                                "reward/q0_mean": ac, "time/step": 1.0}) + "\n"
                                                    for t in range(1, steps + 1)))
    layout.eval_out("base-train").parent.mkdir(parents=True)
    base = {"models": [{"name": "m", "benchmarks": {"train-Q": {"n_samples": 8, "pass@k": {"1": 0.05}, "questions": [
        {"id": "e2-d1-s0-0", "n_correct": 1, "samples": [{}] * 8}]}}}]}
    layout.eval_out("base-train").write_text(json.dumps(base))
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: pytest.fail(f"a job was started: {a}"))
    args = ["--study", str(E2 / "study-v2.yaml"), "--pilot", "--candidates", cand["name"], "--archive", str(arch)]
    assert RUN.main(["--out", str(out), *args]) == 0
    kept = arch / "pilot" / cand["name"]
    assert sorted(p.name for p in (kept / "runs").iterdir()) == ["a1-grpo-s0", "a1-grpo-s1", "a1-grpo-s2"]
    assert (kept / "eval" / "base-train.json").is_file() and not (kept / "runs" / "a1-grpo-s0" / "final").exists()
    dest = tmp_path / "dest"
    assert SUM.main(["--study", str(E2 / "study-v2.yaml"), "--out", str(arch), "--dest", str(dest), "--pilot"]) == 0
    rows = [ln for ln in (dest / "pilot.md").read_text().splitlines() if ln.startswith(f"| {cand['name']} ")]
    assert [r.split(" | ")[5] for r in rows] == ["a1-grpo-s0", "a1-grpo-s1", "a1-grpo-s2"]
    assert [r.split(" | ")[6] for r in rows] == ["0.900", "0.900", "0.000"] and rows[2].endswith("| no |")
    assert "lr 3e-05" in rows[0] and f"{steps}/{steps}" in rows[0]
