"""The demo's code path (train, before/after eval, files) on a tiny random model: fast, offline."""

from __future__ import annotations

import json

import pytest

from tagrpo.demo import preset_path, run_demo


def test_demo_preset_is_shipped_with_the_package():
    assert preset_path("demo").name == "demo.yaml"
    with pytest.raises(FileNotFoundError, match="presets: .*demo"):
        preset_path("nope")


@pytest.mark.slow
def test_demo_runs_end_to_end_on_a_tiny_model(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    res = run_demo(output_dir=tmp_path / "demo", overrides=["model=tiny", "steps=2", "max_new_tokens=6", "autocast=none",
                                                          "tensorboard=false"], heldout_questions=3, heldout_samples=2)
    assert set(res["before"]["pass@k"]) == {"1", "2"} and set(res["after"]["pass@k"]) == {"1", "2"}
    for name in ("eval_before.json", "eval_after.json"):
        doc = json.loads((tmp_path / "demo" / name).read_text())
        assert doc["models"][0]["benchmarks"]["arith-heldout"]["n_questions"] == 3
    assert len((tmp_path / "demo" / "metrics.jsonl").read_text().splitlines()) == 2
    assert (tmp_path / "demo" / "final" / "config.json").exists()
