"""`tagrpo report` on tiny synthetic run directories (the metrics.jsonl keys the trainer logs, for a
GRPO and a TA-GRPO run, plus eval files): PNGs and an HTML page that references them; a headless
Chromium screenshot of the page when /usr/bin/chromium exists."""

from __future__ import annotations

import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"


def write_run(run_dir: Path, algorithm: str, steps: int = 40, variants: int = 4, seed: int = 0,
              diversity_every: int = 5, evals: bool = True) -> Path:
    """A run directory with metrics.jsonl (all keys of CONTEXT.md), config.yaml and eval files."""
    rng = random.Random(seed)
    run_dir.mkdir(parents=True, exist_ok=True)
    nv = variants if algorithm.startswith("ta-grpo") else 1
    sampled = 0
    lines = []
    for s in range(1, steps + 1):
        p = 0.2 + 0.5 * s / steps  # learning
        row = {"step": s, "algorithm": algorithm}
        vals = []
        for v in range(nv):
            m = min(1.0, max(0.0, p - 0.05 * v + rng.gauss(0, 0.05)))
            row[f"reward/variant_{v}/mean"] = m
            row[f"reward/variant_{v}/std"] = math.sqrt(m * (1 - m))
            vals.append(m)
        row["reward/mean"] = sum(vals) / nv
        row["reward/std"] = 0.4
        q0_c, q0_w = (0.1 if nv > 1 else 0.2) + 0.4 * s / steps + rng.gauss(0, 0.03), 0.5 - 0.4 * s / steps + rng.gauss(0, 0.03)
        fam = 0.5 if nv > 1 else 1.0
        row.update({
            "uniform/q0": q0_c + q0_w, "uniform/q0_all_correct": q0_c, "uniform/q0_all_wrong": q0_w,
            "uniform/family": fam * (q0_c + q0_w), "uniform/family_all_correct": fam * q0_c,
            "uniform/family_all_wrong": fam * q0_w,
            "adv/nonzero_frac": 1 - fam * (q0_c + q0_w), "loss/policy": rng.gauss(0, 0.01), "loss/kl": 0.001 * s,
            "loss/clipfrac": 0.02, "loss/approx_kl": 0.0005, "actor/entropy": 1.2 - 0.01 * s,
            "actor/grad_norm": abs(rng.gauss(0.5, 0.1)), "actor/lr": 1e-6,
            "response/length_mean": 90 + rng.gauss(0, 5), "response/length_max": 128.0,
            "response/truncation_rate": 0.1, "perf/tokens_per_s": 60.0,
            "time/generate": 20.0 * nv, "time/reward": 0.3, "time/train": 6.0 * nv, "time/step": 27.0 * nv,
        })
        sampled += 400 * nv
        row["perf/sampled_tokens"] = float(sampled)
        if s % diversity_every == 0:
            row["diversity/mean_pairwise_distance"] = 0.3 - (0.1 if nv == 1 else 0.03) * s / steps
        lines.append(json.dumps(row))
    lines.append('{"step": 41, "algorithm": "gr')  # a line cut by a kill
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    (run_dir / "config.yaml").write_text(f"algorithm: {algorithm}\nsteps: {steps}\nnum_neighbors: {variants - 1}\n")
    if evals:
        from tagrpo.eval import make_document, write_document

        for stem, bump in (("eval_before", 0.0), ("eval_after", 0.08 if nv > 1 else 0.04)):
            res = {"n_questions": 20, "pass@k": {str(k): min(1.0, 0.1 + 0.12 * math.log2(k) + bump) for k in (1, 2, 4, 8)},
                   "greedy_accuracy": 0.15 + bump, "diversity": 0.25, "mean_response_length": 88.0,
                   "truncation_rate": 0.05, "questions": []}
            write_document(run_dir / f"{stem}.json", make_document([{"name": stem, "benchmarks": {"gsm8k_dev": res}}], {"n": 8}))
    return run_dir


@pytest.fixture
def two_runs(tmp_path):
    return [write_run(tmp_path / "runs" / "grpo", "grpo", seed=1), write_run(tmp_path / "runs" / "ta", "ta-grpo", seed=2)]


def test_load_runs(two_runs):
    from tagrpo.report import load_runs

    grpo, ta = load_runs(two_runs)
    assert grpo.label == "grpo" and ta.label == "ta (ta-grpo)"
    assert len(ta.steps) == 40 and ta.skipped_lines == 1
    assert ta.variants() == [0, 1, 2, 3] and grpo.variants() == [0]
    xs, _ = ta.series("diversity/mean_pairwise_distance")
    assert xs == [5.0, 10.0, 15.0, 20.0, 25.0, 30.0, 35.0, 40.0]
    assert [s for s, _ in ta.evals] == ["eval_before", "eval_after"]  # before first


def test_repeated_steps_keep_the_last_row(tmp_path):
    from tagrpo.report import load_run

    d = tmp_path / "r"
    d.mkdir()
    (d / "metrics.jsonl").write_text("\n".join(json.dumps({"step": s, "reward/mean": v}) for s, v in ((1, 0.1), (2, 0.2), (2, 0.9), (3, 0.3))))
    assert load_run(d).series("reward/mean") == ([1.0, 2.0, 3.0], [0.1, 0.9, 0.3])


def test_report_cli_writes_pngs_and_page(two_runs, tmp_path):
    out = tmp_path / "report"
    env = dict(os.environ, MPLBACKEND="Agg")
    res = subprocess.run([sys.executable, "-m", "tagrpo.cli", "report", *map(str, two_runs), "--output", str(out)],
                         check=False, capture_output=True, text=True, timeout=180, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    pngs = {p.name for p in out.glob("*.png")}
    assert pngs == {"reward.png", "uniform.png", "diversity.png", "passk.png", "time.png", "health.png"}
    for p in out.glob("*.png"):
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 10_000
    page = (out / "index.html").read_text()
    # every PNG is referenced by name and embedded (the page works when moved on its own)
    for name in pngs:
        assert f'href="{name}"' in page
    assert page.count('src="data:image/png;base64,') == len(pngs)
    assert "grpo · eval_before" in page and "ta (ta-grpo) · eval_after" in page
    assert "1 unreadable line(s)" in page
    # the eval table shows the after-vs-before difference in points
    assert re.search(r"\(\+8\.0\)", page)


def test_report_single_run_default_output_and_errors(tmp_path):
    from typer.testing import CliRunner

    from tagrpo.cli import app

    run = write_run(tmp_path / "only", "grpo", steps=8, diversity_every=100, evals=False)
    res = CliRunner().invoke(app, ["report", str(run)])
    assert res.exit_code == 0, res.output
    out = run / "report"
    assert (out / "index.html").is_file()
    assert not (out / "diversity.png").exists() and not (out / "passk.png").exists()  # no data, no figure
    assert "no data for: Diversity, pass@k" in (out / "index.html").read_text()
    empty = tmp_path / "empty"
    empty.mkdir()
    res = CliRunner().invoke(app, ["report", str(empty)])
    assert res.exit_code == 2 and "no metrics.jsonl" in res.output
    res = CliRunner().invoke(app, ["report", str(tmp_path / "missing")])
    assert res.exit_code == 2 and "no such run directory" in res.output


@pytest.mark.slow
@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian chromium not installed (apt-get install -y chromium)")
def test_page_renders_in_headless_chromium(two_runs, tmp_path):
    from tagrpo.report import write_report

    page = write_report(two_runs, tmp_path / "report")
    shot = tmp_path / "screenshot.png"
    profile = tmp_path / "chromium-profile"
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={profile}", f"--screenshot={shot}", "--window-size=1280,2000", page.resolve().as_uri()]
    res = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert shot.is_file()
    keep = os.environ.get("TAGRPO_KEEP_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)
    # the screenshot is not blank: the figures and tables put many distinct colours on the page
    from matplotlib import image

    px = image.imread(shot)
    assert px.shape[0] == 2000 and px.shape[1] == 1280
    colours = {tuple((px[y, x, :3] * 255).astype(int)) for y in range(0, 2000, 7) for x in range(0, 1280, 7)}
    assert len(colours) > 50
