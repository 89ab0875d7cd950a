"""Diagnostics against loop references: uniform_fraction (all-correct and all-wrong counted
apart), nonzero_advantage_fraction, and the per-token log-prob / entropy helpers."""

from __future__ import annotations

import math
import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tagrpo.core import (
    group_advantages,
    nonzero_advantage_fraction,
    selective_log_softmax,
    token_entropy,
    uniform_fraction,
)


def ref_uniform_fraction(rewards: list[float], ids: list[int]) -> dict:
    groups: dict[int, list[float]] = {}
    for r, g in zip(rewards, ids):
        groups.setdefault(g, []).append(r)
    n = len(groups)
    uniform = [vals for vals in groups.values() if all(v == vals[0] for v in vals)]
    return {
        "uniform": len(uniform) / n,
        "all_correct": sum(1 for v in uniform if v[0] >= 1) / n,
        "all_wrong": sum(1 for v in uniform if v[0] <= 0) / n,
        "groups": n,
    }


def random_rewards(rng: random.Random):
    labels = rng.sample(range(-500, 500), rng.randint(1, 12))
    rewards, ids = [], []
    for g in labels:
        size = rng.randint(1, 16)
        kind = rng.choice(["right", "wrong", "mixed", "half", "continuous"])
        for _ in range(size):
            rewards.append(
                {"right": 1.0, "wrong": 0.0, "half": 0.5, "mixed": float(rng.random() < 0.5), "continuous": rng.random()}[kind]
            )
            ids.append(g)
    order = list(range(len(rewards)))
    rng.shuffle(order)
    return [rewards[i] for i in order], [ids[i] for i in order]


@pytest.mark.parametrize("seed", range(40))
def test_uniform_fraction_matches_loop(seed):
    rewards, ids = random_rewards(random.Random(seed))
    got = uniform_fraction(torch.tensor(rewards), torch.tensor(ids))
    want = ref_uniform_fraction(rewards, ids)
    assert got.keys() >= {"uniform", "all_correct", "all_wrong", "groups"}
    for k, v in want.items():
        assert got[k] == pytest.approx(v, abs=1e-12), k


def test_all_correct_and_all_wrong_are_counted_apart():
    rewards = torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.5, 0.5, 2.0, 2.0, -1.0, -1.0])
    ids = torch.tensor([4, 4, 4, 9, 9, 2, 2, 7, 7, 3, 3, 8, 8])
    # groups: 4 all right; 9 all wrong; 2 mixed; 7 uniform at 0.5 (neither); 3 uniform >= 1; 8 uniform <= 0
    got = uniform_fraction(rewards, ids)
    assert got["groups"] == 6
    assert got["uniform"] == pytest.approx(5 / 6)
    assert got["all_correct"] == pytest.approx(2 / 6)
    assert got["all_wrong"] == pytest.approx(2 / 6)


def test_group_of_one_is_uniform():
    got = uniform_fraction(torch.tensor([1.0, 0.0, 1.0]), torch.tensor([0, 1, 1]))
    assert got == {"uniform": 0.5, "all_correct": 0.5, "all_wrong": 0.0, "groups": 2}


def test_family_view_has_fewer_uniform_groups_than_prompt_view():
    # q0 all wrong, its neighbor half right: uniform per prompt, not per family
    rewards = torch.tensor([0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0])
    prompt_ids = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    family_ids = torch.zeros(8, dtype=torch.long)
    assert uniform_fraction(rewards, prompt_ids)["uniform"] == 0.5
    assert uniform_fraction(rewards, family_ids)["uniform"] == 0.0


def test_uniform_fraction_empty_and_validation():
    assert uniform_fraction(torch.zeros(0), torch.zeros(0, dtype=torch.long))["groups"] == 0
    with pytest.raises(ValueError, match=r"rewards.*\(3,\).*group_ids.*\(2,\)"):
        uniform_fraction(torch.zeros(3), torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"rewards contains NaN"):
        uniform_fraction(torch.tensor([0.0, float("nan")]), torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"rewards must be 1-D"):
        uniform_fraction(torch.zeros(2, 2), torch.zeros(2, 2, dtype=torch.long))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.0, 0.5, 1.0]), st.integers(0, 5)), min_size=1, max_size=60))
def test_property_uniform_fraction_agrees_with_zero_advantages(rows):
    rewards = [r for r, _ in rows]
    ids = [g for _, g in rows]
    got = uniform_fraction(torch.tensor(rewards), torch.tensor(ids))
    assert got == pytest.approx(ref_uniform_fraction(rewards, ids))
    assert got["all_correct"] + got["all_wrong"] <= got["uniform"] + 1e-12
    # a group is uniform exactly when all its advantages are 0
    adv = group_advantages(torch.tensor(rewards), torch.tensor(ids))
    zero_groups = {g for g in set(ids) if all(a == 0 for a, i in zip(adv.tolist(), ids) if i == g)}
    assert len(zero_groups) / len(set(ids)) == pytest.approx(got["uniform"])


def test_nonzero_advantage_fraction():
    assert nonzero_advantage_fraction(torch.tensor([0.0, 0.5, -1e-3, 1e-12])) == pytest.approx(0.5)
    assert nonzero_advantage_fraction(torch.zeros(0)) == 0.0
    assert nonzero_advantage_fraction(torch.tensor([1e-6]), tol=1e-5) == 0.0
    with pytest.raises(ValueError, match="advantages must be 1-D"):
        nonzero_advantage_fraction(torch.zeros(2, 2))


# --- per-token log-probs and entropy ------------------------------------------------------------
def test_selective_log_softmax_matches_loop():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 11, generator=g) * 4  # (B, T, V)
    index = torch.randint(0, 11, (3, 5), generator=g)  # (B, T)
    got = selective_log_softmax(logits, index)
    assert got.shape == (3, 5) and got.dtype == torch.float32
    for b in range(3):
        for t in range(5):
            row = logits[b, t].double().tolist()
            lse = math.log(sum(math.exp(x) for x in row))
            assert got[b, t].item() == pytest.approx(row[index[b, t]] - lse, abs=1e-5)


def test_selective_log_softmax_bf16_is_computed_in_float32():
    logits = torch.randn(2, 4, 50, generator=torch.Generator().manual_seed(1)) * 10
    index = torch.randint(0, 50, (2, 4), generator=torch.Generator().manual_seed(2))
    got = selective_log_softmax(logits.bfloat16(), index)
    want = torch.log_softmax(logits.bfloat16().float(), -1).gather(-1, index.unsqueeze(-1)).squeeze(-1)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_selective_log_softmax_gradient_matches_log_softmax():
    logits = torch.randn(2, 3, 7, generator=torch.Generator().manual_seed(3), dtype=torch.float64, requires_grad=True)
    index = torch.randint(0, 7, (2, 3), generator=torch.Generator().manual_seed(4))
    (g1,) = torch.autograd.grad(selective_log_softmax(logits, index).sum(), logits)
    (g2,) = torch.autograd.grad(torch.log_softmax(logits, -1).gather(-1, index.unsqueeze(-1)).sum(), logits)
    torch.testing.assert_close(g1.double(), g2, rtol=1e-5, atol=1e-6)


def test_token_entropy_matches_loop():
    logits = torch.randn(2, 3, 9, generator=torch.Generator().manual_seed(5)) * 3
    got = token_entropy(logits)
    assert got.shape == (2, 3)
    for b in range(2):
        for t in range(3):
            row = logits[b, t].double().tolist()
            z = sum(math.exp(x) for x in row)
            p = [math.exp(x) / z for x in row]
            assert got[b, t].item() == pytest.approx(-sum(q * math.log(q) for q in p), abs=1e-5)
    # uniform logits: entropy log V; a near one-hot: ~0
    assert token_entropy(torch.zeros(1, 1, 9)).item() == pytest.approx(math.log(9), abs=1e-6)
    peaked = torch.full((1, 1, 9), -1e4)
    peaked[..., 3] = 0
    assert token_entropy(peaked).item() == pytest.approx(0.0, abs=1e-6)


def test_token_entropy_with_masked_vocabulary_is_finite():
    logits = torch.tensor([[[0.0, 1.0, float("-inf"), float("-inf")]]], requires_grad=True)  # two live tokens
    h = token_entropy(logits)
    p = torch.softmax(torch.tensor([0.0, 1.0]), -1)
    assert h.item() == pytest.approx(-(p * p.log()).sum().item(), abs=1e-6)
    (g,) = torch.autograd.grad(h.sum(), logits)
    assert torch.isfinite(g).all()
    (g_ref,) = torch.autograd.grad(token_entropy(logits[..., :2]).sum(), logits)
    torch.testing.assert_close(g, g_ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("chunk_rows", [1, 4, 7, 64])
def test_token_entropy_is_the_same_whatever_the_chunking(chunk_rows):
    logits = (torch.randn(3, 5, 11, generator=torch.Generator().manual_seed(6)) * 2).requires_grad_(True)
    whole = token_entropy(logits, chunk_rows=10_000)
    got = token_entropy(logits, chunk_rows=chunk_rows)
    torch.testing.assert_close(got, whole, rtol=0, atol=1e-6)
    (g1,) = torch.autograd.grad(got.sum(), logits)
    (g2,) = torch.autograd.grad(whole.sum(), logits)
    torch.testing.assert_close(g1, g2, rtol=0, atol=1e-6)
    assert token_entropy(torch.zeros(0, 4, 11)).shape == (0, 4)
