"""benchmarks/speed_vs_trl/lockstep.py: rows take turns one step at a time; per-step paired ratios."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
import textwrap
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1] / "benchmarks" / "speed_vs_trl"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"speed_vs_trl_{name}", HERE / f"{name}.py")
    spec.loader.exec_module(mod := importlib.util.module_from_spec(spec))
    return mod


L = _load("lockstep")

# A stand-in for `bench.py --child`: bench.Lockstep's protocol, each "step" appending
# "label start" / "label end" to a shared log (and sleeping a little so overlaps would show).
FAKE_CHILD = textwrap.dedent("""
    import sys, time, importlib.util
    spec = importlib.util.spec_from_file_location("bench", {bench!r})
    spec.loader.exec_module(bench := importlib.util.module_from_spec(spec))
    label, steps, log, die_at = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    gate = bench.Lockstep.from_env()
    gate.signal()
    for k in range(steps):
        gate.wait()
        if k == die_at:
            sys.exit(3)
        with open(log, "a") as f:
            f.write(f"{{label}} start {{k}}\\n")
        time.sleep(0.02)
        with open(log, "a") as f:
            f.write(f"{{label}} end {{k}}\\n")
        gate.signal()
""")


def _children(tmp_path: Path, labels: list[str], steps: int, die: dict | None = None):
    script = tmp_path / "fake_child.py"
    script.write_text(FAKE_CHILD.format(bench=str(HERE / "bench.py")))
    log = tmp_path / "log.txt"
    env = {"PATH": "/usr/bin:/bin"}
    kids = [L.Child(lb, [sys.executable, str(script), lb, str(steps), str(log), str((die or {}).get(lb, -1))], env)
            for lb in labels]
    return kids, log


def test_rows_take_turns_one_step_at_a_time_in_abba_order(tmp_path):
    kids, log = _children(tmp_path, ["A", "B", "C"], steps=4)
    L.run_lockstep(kids, 4, log=lambda s: None)
    lines = log.read_text().split()
    events = [(lines[i], lines[i + 1], int(lines[i + 2])) for i in range(0, len(lines), 3)]
    # never two steps at once: every start is followed by the same row's end
    assert all(events[i][1] == "start" and events[i + 1][:1] == events[i][:1] and events[i + 1][1] == "end"
               for i in range(0, len(events), 2))
    order = [(lb, k) for lb, what, k in events if what == "start"]
    assert order == [("A", 0), ("B", 0), ("C", 0), ("C", 1), ("B", 1), ("A", 1),
                     ("A", 2), ("B", 2), ("C", 2), ("C", 3), ("B", 3), ("A", 3)]
    assert all(k.proc.returncode == 0 for k in kids)


def test_a_row_whose_process_dies_is_named(tmp_path):
    kids, _ = _children(tmp_path, ["ref", "broken"], steps=3, die={"broken": 1})
    try:
        with pytest.raises(RuntimeError, match=r"row broken: its process ended \(exit 3\)"):
            L.run_lockstep(kids, 3, log=lambda s: None)
    finally:
        for k in kids:
            if k.proc.poll() is None:
                k.proc.kill()


def test_bench_lockstep_is_a_no_op_without_the_environment(monkeypatch):
    bench = _load("bench")
    monkeypatch.delenv("TAGRPO_BENCH_LOCKSTEP", raising=False)
    gate = bench.Lockstep.from_env()
    gate.signal()
    gate.wait()  # returns at once: nothing to read


def test_paired_ratios_cancel_a_drift_shared_by_both_rows():
    drift = [10.0, 12.5, 9.0, 14.0, 11.0]  # the machine's speed from step to step
    out = L.paired_ratios(drift, [1.1 * x for x in drift])
    assert out["geomean"] == pytest.approx(1.1) and out["median"] == pytest.approx(1.1)
    assert out["lo"] == pytest.approx(1.1) and out["hi"] == pytest.approx(1.1)
    # the ratio of medians of unpaired runs would not see 1.1 when one row ran in a slow stretch
    assert sorted(out["ratios"]) == pytest.approx([1.1] * 5)


def test_paired_ratios_interval_against_a_slow_reference():
    ref, other = [10.0, 11.0, 9.0, 12.0], [10.5, 11.0, 9.9, 12.0]
    logs = [math.log(o / r) for r, o in zip(ref, other)]
    n = len(logs)
    mean = sum(logs) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1))
    half = 3.182446305284263 * sd / math.sqrt(n)  # t(0.975, 3)
    out = L.paired_ratios(ref, other)
    assert out["geomean"] == pytest.approx(math.exp(mean))
    assert (out["lo"], out["hi"]) == pytest.approx((math.exp(mean - half), math.exp(mean + half)))
    assert out["median"] == pytest.approx((1.0 + 1.05) / 2)  # ratios 1.05, 1.0, 1.1, 1.0
    with pytest.raises(ValueError, match="4 reference steps vs 3"):
        L.paired_ratios(ref, other[:3])


def test_summarize_pairs_every_row_with_the_first_after_warmup():
    def run(times, peak):
        return {"peak_rss_mb": peak, "steps": [{"step": s, "gen": s / 2, "train": s / 2, "sampled_tokens": 100} for s in times]}

    raw = {"base": run([99.0, 10.0, 20.0], 6000.0), "new": run([1.0, 11.0, 22.0], 3000.0)}
    doc = L.summarize(["base", "new"], raw, warmup=1)
    (p,) = doc["paired"]
    assert p["row"] == "new" and p["vs"] == "base" and p["step s"]["n"] == 2
    assert p["step s"]["geomean"] == pytest.approx(1.1) and p["train s"]["geomean"] == pytest.approx(1.1)
    assert [r["step s"] for r in doc["rows"]] == [15.0, 16.5]
    assert "| new / base | 1.100 [1.100, 1.100]; 1.100 |" in L.markdown({**doc, "command": "x", "date": "d", "machine": "m"})


@pytest.mark.parametrize("spec", ["nolabel", "a=src", "=src:", "a=:x=1", "a=src:gradient_checkpointing"])
def test_parse_row_rejects_malformed_rows(spec):
    with pytest.raises(ValueError, match="expected LABEL=SRC:KEY=VAL"):
        L.parse_row(spec)


def test_parse_row_and_turn_order():
    assert L.parse_row("base=/tmp/base/src:") == ("base", "/tmp/base/src", [])
    assert L.parse_row("gc=src:gradient_checkpointing=true,optimizer_state=bf16") == (
        "gc", "src", ["gradient_checkpointing=true", "optimizer_state=bf16"])
    assert L.turn_order(["a", "b"], 0) == ["a", "b"] and L.turn_order(["a", "b"], 1) == ["b", "a"]
    json.dumps(L.paired_ratios([1.0, 2.0], [1.0, 2.0]))  # results.json must serialize
