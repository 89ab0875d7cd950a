"""The typed training config: presets load, bad values fail at load time with a clear message."""

from __future__ import annotations

from pathlib import Path

import pytest

from tagrpo.errors import TagrpoError
from tagrpo.train.config import FIELDS, TrainConfig, load_config

PRESETS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))


def test_presets_exist():
    names = {p.stem for p in PRESETS}
    assert {"demo", "tiny", "qwen3-1.7b-math", "llama-3.2-1b-math"} <= names


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.stem)
def test_every_preset_loads_and_validates(path):
    cfg = load_config(path)
    assert isinstance(cfg, TrainConfig)


def test_paper_presets_use_the_authors_settings():
    cfg = load_config(Path(__file__).resolve().parents[1] / "configs" / "qwen3-1.7b-math.yaml")
    assert (cfg.samples_per_variant, cfg.lr, cfg.schedule, cfg.warmup_ratio, cfg.beta, cfg.clip_low, cfg.agg) == (
        8, 1e-6, "cosine", 0.1, 0.001, 0.2, "token-mean")
    assert (cfg.max_prompt_tokens, cfg.max_new_tokens, cfg.temperature) == (512, 3072, 1.0)


def test_every_field_is_documented():
    for name, f in FIELDS.items():
        assert f.metadata.get("help"), f"config field {name} has no help text"


def test_overrides_are_typed():
    cfg = load_config(None, ["steps=3", "lr=2e-5", "lora=true", "system_prompt=You are 1 tutor", "beta=0"])
    assert cfg.steps == 3 and cfg.lr == 2e-5 and cfg.lora is True and cfg.system_prompt == "You are 1 tutor" and cfg.beta == 0.0


@pytest.mark.parametrize("override,match", [
    ("stepz=3", "unknown config key 'stepz'.*steps"),
    ("steps=three", "'steps' must be an integer"),
    ("lora=maybe", "'lora' must be true or false"),
    ("algorithm=ppo", "'ppo' is not valid; choose one of grpo, grpo-matched, ta-grpo"),
    ("agg=mean", "choose one of token-mean"),
    ("adv_scale=std", "choose one of group, batch, none"),
    ("samples_per_variant=0", "'samples_per_variant': must be >= 1"),
    ("generate_batch_size=8", "cannot hold one whole family of 16"),
    ("warmup_ratio=1.5", "warmup_ratio"),
    ("augment=sometimes", "choose one of always, on-uniform"),
    ("neighbors=llm", "'llm' is not valid; choose one of auto, column, rules, generator"),
    ("gradient_checkpointing_mode=attention", "'gradient_checkpointing_mode': 'attention' is not valid; choose one of full, selective"),
])
def test_bad_values_fail_at_load_time(override, match):
    with pytest.raises(TagrpoError, match=match):
        load_config(None, [override])


def test_families_must_split_evenly_over_processes():
    with pytest.raises(TagrpoError, match="families are never split"):
        load_config(None, ["questions_per_step=3"], world_size=2)


def test_on_uniform_needs_ta_grpo():
    with pytest.raises(TagrpoError, match="on-uniform"):
        load_config(None, ["algorithm=grpo", "augment=on-uniform"])


def test_yaml_errors_name_the_file(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("steps: [1\n")
    with pytest.raises(TagrpoError, match=str(p)):
        load_config(p)
    p.write_text("stepz: 1\n")
    with pytest.raises(TagrpoError, match=f"{p}: unknown config key 'stepz'"):
        load_config(p)


def test_selective_checkpointing_warns_where_it_does_nothing():
    def warned(*sets):
        return [w for w in load_config(None, list(sets)).warnings() if "gradient_checkpointing_mode" in w]

    assert not warned("gradient_checkpointing=true", "gradient_checkpointing_mode=selective")
    assert "without gradient_checkpointing" in warned("gradient_checkpointing_mode=selective")[0]
    assert "lean_layers, which is off" in warned("gradient_checkpointing=true", "gradient_checkpointing_mode=selective",
                                                 "lean_layers=false")[0]
