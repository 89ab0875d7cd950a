"""policy_loss and aggregate against slow loop references: the clipped surrogate, the three
aggregations, the k3 KL, clip fractions, clip-higher, gradients and input validation."""

from __future__ import annotations

import math
import random

import pytest
import torch

from tagrpo.core import AGGREGATIONS, aggregate, policy_loss


# --- references (plain Python over nested lists) ------------------------------------------------
def ref_aggregate(vals, mask, agg):
    B, T = len(vals), len(vals[0])
    if agg == "token-mean":
        num = sum(vals[b][t] * mask[b][t] for b in range(B) for t in range(T))
        den = sum(mask[b][t] for b in range(B) for t in range(T))
        return num / den
    if agg == "seq-mean-token-mean":
        per_seq = []
        for b in range(B):
            n = sum(mask[b])
            if n > 0:
                per_seq.append(sum(vals[b][t] * mask[b][t] for t in range(T)) / n)
        return sum(per_seq) / len(per_seq)
    assert agg == "seq-mean-token-sum-norm"
    return sum(sum(vals[b][t] * mask[b][t] for t in range(T)) / T for b in range(B)) / B


def ref_weights(mask, agg):
    """d aggregate / d value[b][t]: the weight each token gets."""
    B, T = len(mask), len(mask[0])
    if agg == "token-mean":
        n = sum(map(sum, mask))
        return [[mask[b][t] / n for t in range(T)] for b in range(B)]
    if agg == "seq-mean-token-mean":
        live = sum(1 for b in range(B) if sum(mask[b]) > 0)
        return [[mask[b][t] / (sum(mask[b]) * live) if sum(mask[b]) > 0 else 0.0 for t in range(T)] for b in range(B)]
    return [[mask[b][t] / (T * B) for t in range(T)] for b in range(B)]


def ref_policy_loss(logp, old, adv, mask, clip_low, clip_high, agg, ref=None, beta=0.0):
    """Loss, metrics and d loss / d logp, token by token."""
    B, T = len(logp), len(logp[0])
    pg = [[0.0] * T for _ in range(B)]
    kl = [[0.0] * T for _ in range(B)]
    d_pg = [[0.0] * T for _ in range(B)]
    d_kl = [[0.0] * T for _ in range(B)]
    clipped = [[0.0] * T for _ in range(B)]
    low = [[0.0] * T for _ in range(B)]
    high = [[0.0] * T for _ in range(B)]
    for b in range(B):
        for t in range(T):
            ratio = math.exp(logp[b][t] - old[b][t])
            ratio_c = min(max(ratio, 1 - clip_low), 1 + clip_high)
            unclipped_term, clipped_term = -adv[b] * ratio, -adv[b] * ratio_c
            pg[b][t] = max(unclipped_term, clipped_term)
            if clipped_term > unclipped_term:  # the clipped branch wins: no gradient
                clipped[b][t] = 1.0
                low[b][t] = float(ratio < 1 - clip_low)
                high[b][t] = float(ratio > 1 + clip_high)
            else:
                d_pg[b][t] = -adv[b] * ratio
            if ref is not None:
                d = ref[b][t] - logp[b][t]
                kl[b][t] = math.exp(d) - d - 1
                d_kl[b][t] = 1 - math.exp(d)
    w = ref_weights(mask, agg)
    pg_loss = ref_aggregate(pg, mask, agg)
    kl_loss = ref_aggregate(kl, mask, agg) if ref is not None else 0.0
    grad = [[w[b][t] * (d_pg[b][t] + beta * d_kl[b][t]) for t in range(T)] for b in range(B)]
    n_tok = sum(map(sum, mask))

    def tok_mean(x):
        return sum(x[b][t] * mask[b][t] for b in range(B) for t in range(T)) / n_tok

    metrics = {
        "loss/policy": pg_loss,
        "loss/total": pg_loss + beta * kl_loss,
        "loss/clipfrac": tok_mean(clipped),
        "loss/clipfrac_low": tok_mean(low),
        "loss/clipfrac_high": tok_mean(high),
        "loss/tokens": n_tok,
    }
    if ref is not None:
        metrics["loss/kl"] = kl_loss
    return pg_loss + beta * kl_loss, metrics, grad


def random_case(rng: random.Random, dtype=torch.float64):
    B, T = rng.randint(1, 8), rng.randint(1, 12)
    g = torch.Generator().manual_seed(rng.randrange(2**31))
    logp = -torch.rand(B, T, generator=g, dtype=dtype) * 4  # (B, T)
    old = logp + 0.3 * torch.randn(B, T, generator=g, dtype=dtype)  # ratios around 1, many clipped
    ref = logp + 0.3 * torch.randn(B, T, generator=g, dtype=dtype)
    adv = torch.randn(B, generator=g, dtype=dtype)
    lengths = [rng.randint(0, T) for _ in range(B)]  # uneven, some sequences empty
    if sum(lengths) == 0:
        lengths[0] = 1
    mask = torch.zeros(B, T, dtype=dtype)
    for b, n in enumerate(lengths):
        if rng.random() < 0.5:
            mask[b, T - n :] = 1  # left padding
        else:
            mask[b, :n] = 1  # right padding
    return logp, old, ref, adv, mask


def L(t: torch.Tensor):
    return t.tolist()


# --- aggregate ----------------------------------------------------------------------------------
@pytest.mark.parametrize("agg", AGGREGATIONS)
@pytest.mark.parametrize("seed", range(20))
def test_aggregate_matches_loop(agg, seed):
    logp, _, _, _, mask = random_case(random.Random(seed))
    vals = torch.randn(logp.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    got = aggregate(vals, mask, agg)
    assert got.shape == ()
    assert got.item() == pytest.approx(ref_aggregate(L(vals), L(mask), agg), rel=1e-12, abs=1e-12)


def test_aggregations_differ_as_documented_with_unequal_lengths():
    # sequence 0: one token worth 1; sequence 1: four tokens worth 0; T = 4
    vals = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    assert aggregate(vals, mask, "token-mean").item() == pytest.approx(1 / 5)  # every token counts once
    assert aggregate(vals, mask, "seq-mean-token-mean").item() == pytest.approx(1 / 2)  # short seqs weigh more
    assert aggregate(vals, mask, "seq-mean-token-sum-norm").item() == pytest.approx((1 / 4 + 0) / 2)  # / T, no length bias


def test_aggregations_agree_when_all_sequences_are_full():
    vals = torch.randn(5, 7, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    mask = torch.ones(5, 7, dtype=torch.float64)
    vals_ = [aggregate(vals, mask, a).item() for a in AGGREGATIONS]
    assert vals_ == pytest.approx([vals.mean().item()] * 3, rel=1e-12)


def test_token_mean_equals_seq_mean_for_equal_lengths_only():
    vals = torch.randn(3, 6, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    mask = torch.zeros(3, 6, dtype=torch.float64)
    mask[:, :4] = 1  # equal lengths 4 < T
    tm = aggregate(vals, mask, "token-mean").item()
    assert tm == pytest.approx(aggregate(vals, mask, "seq-mean-token-mean").item(), rel=1e-12)
    assert aggregate(vals, mask, "seq-mean-token-sum-norm").item() == pytest.approx(tm * 4 / 6, rel=1e-12)


def test_empty_sequences_are_skipped_by_seq_mean_but_counted_by_sum_norm():
    vals = torch.tensor([[2.0, 2.0], [9.0, 9.0]])
    mask = torch.tensor([[1.0, 1.0], [0.0, 0.0]])
    assert aggregate(vals, mask, "seq-mean-token-mean").item() == pytest.approx(2.0)
    assert aggregate(vals, mask, "seq-mean-token-sum-norm").item() == pytest.approx((4.0 / 2) / 2)
    assert aggregate(vals, mask, "token-mean").item() == pytest.approx(2.0)


def test_aggregate_accepts_bool_mask():
    vals = torch.tensor([[1.0, 3.0], [5.0, 7.0]])
    mask = torch.tensor([[True, False], [True, True]])
    assert aggregate(vals, mask, "token-mean").item() == pytest.approx(13 / 3)


def test_aggregate_unknown_agg_names_choices():
    with pytest.raises(ValueError) as e:
        aggregate(torch.zeros(1, 1), torch.ones(1, 1), "mean")
    msg = str(e.value)
    assert "agg" in msg and "'mean'" in msg and all(repr(a) in msg for a in AGGREGATIONS)


# --- policy_loss against the loop reference -----------------------------------------------------
@pytest.mark.parametrize("agg", AGGREGATIONS)
@pytest.mark.parametrize("seed", range(25))
def test_policy_loss_value_metrics_and_gradient_match_loop(agg, seed):
    rng = random.Random(1000 + seed)
    logp, old, ref, adv, mask = random_case(rng)
    clip_low, clip_high = rng.choice([(0.2, 0.2), (0.2, 0.28), (0.1, 0.3), (0.0, 0.0)])
    beta = rng.choice([0.0, 0.001, 0.1, 1.0])
    x = logp.clone().requires_grad_(True)
    loss, metrics = policy_loss(x, old, adv, mask, clip_low=clip_low, clip_high=clip_high, agg=agg, ref_logp=ref, beta=beta)
    want, want_metrics, want_grad = ref_policy_loss(L(logp), L(old), L(adv), L(mask), clip_low, clip_high, agg, L(ref), beta)
    assert loss.item() == pytest.approx(want, rel=1e-10, abs=1e-12)
    for k, v in want_metrics.items():
        assert metrics[k] == pytest.approx(v, rel=1e-10, abs=1e-12), k
    (grad,) = torch.autograd.grad(loss, x)
    torch.testing.assert_close(grad, torch.tensor(want_grad, dtype=torch.float64), rtol=1e-9, atol=1e-12)
    assert (grad[mask == 0] == 0).all()  # padding gets no gradient


@pytest.mark.parametrize("agg", AGGREGATIONS)
def test_policy_loss_float32_matches_loop(agg):
    logp, old, ref, adv, mask = random_case(random.Random(5), dtype=torch.float32)
    loss, metrics = policy_loss(logp, old, adv, mask, agg=agg, ref_logp=ref, beta=0.04)
    want, want_metrics, _ = ref_policy_loss(L(logp), L(old), L(adv), L(mask), 0.2, 0.2, agg, L(ref), 0.04)
    assert loss.dtype == torch.float32
    assert loss.item() == pytest.approx(want, rel=1e-5, abs=1e-6)
    assert metrics["loss/clipfrac"] == pytest.approx(want_metrics["loss/clipfrac"], abs=1e-6)


def test_loss_is_minus_mean_advantage_on_policy():
    # logp == old_logp: ratio 1 everywhere, nothing clipped, loss = -agg(A)
    logp = -torch.rand(4, 5, dtype=torch.float64)
    adv = torch.tensor([1.0, -2.0, 0.5, 0.0], dtype=torch.float64)
    mask = torch.ones(4, 5, dtype=torch.float64)
    mask[1, 3:] = 0
    loss, m = policy_loss(logp, logp.clone(), adv, mask)
    assert loss.item() == pytest.approx(-(adv[:, None] * mask).sum().item() / mask.sum().item())
    assert m["loss/clipfrac"] == 0.0 and m["loss/ratio_mean"] == pytest.approx(1.0)
    assert m["loss/approx_kl"] == pytest.approx(0.0, abs=1e-15)


# --- KL -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("agg", AGGREGATIONS)
def test_kl_is_zero_with_zero_gradient_when_ref_equals_logp(agg):
    logp, old, _, adv, mask = random_case(random.Random(3))
    x = logp.clone().requires_grad_(True)
    with_kl, m = policy_loss(x, old, adv, mask, agg=agg, ref_logp=logp.clone(), beta=0.5)
    assert m["loss/kl"] == 0.0
    (g_kl,) = torch.autograd.grad(with_kl, x)
    y = logp.clone().requires_grad_(True)
    without, _ = policy_loss(y, old, adv, mask, agg=agg)
    (g_plain,) = torch.autograd.grad(without, y)
    assert with_kl.item() == pytest.approx(without.item(), abs=1e-15)
    torch.testing.assert_close(g_kl, g_plain, rtol=0, atol=1e-15)


@pytest.mark.parametrize("agg", AGGREGATIONS)
@pytest.mark.parametrize("seed", range(5))
def test_kl_matches_k3_loop(agg, seed):
    logp, old, ref, adv, mask = random_case(random.Random(50 + seed))
    ref = ref + torch.randn(ref.shape, dtype=ref.dtype, generator=torch.Generator().manual_seed(seed))  # far from logp
    _, m = policy_loss(logp, old, adv, mask, agg=agg, ref_logp=ref, beta=0.0)
    k3 = [[math.exp(r - p) - (r - p) - 1 for r, p in zip(rr, pp)] for rr, pp in zip(L(ref), L(logp))]
    assert m["loss/kl"] == pytest.approx(ref_aggregate(k3, L(mask), agg), rel=1e-10)
    assert m["loss/kl"] > 0  # k3 >= 0, and > 0 where ref != logp


def test_kl_is_reported_without_beta_and_not_added():
    logp, old, ref, adv, mask = random_case(random.Random(9))
    loss0, m0 = policy_loss(logp, old, adv, mask, ref_logp=ref, beta=0.0)
    loss1, m1 = policy_loss(logp, old, adv, mask, ref_logp=ref, beta=2.0)
    assert m0["loss/kl"] == pytest.approx(m1["loss/kl"]) and m0["loss/kl"] > 0
    assert loss1.item() == pytest.approx(loss0.item() + 2.0 * m0["loss/kl"], rel=1e-12)
    assert m1["loss/total"] == pytest.approx(loss1.item())
    assert "loss/kl" not in policy_loss(logp, old, adv, mask)[1]


def test_no_gradient_reaches_old_or_ref_logp():
    logp, old, ref, adv, mask = random_case(random.Random(4))
    x, o, r = (t.clone().requires_grad_(True) for t in (logp, old, ref))
    loss, _ = policy_loss(x, o, adv, mask, ref_logp=r, beta=0.1)
    gx, go, gr = torch.autograd.grad(loss, (x, o, r), allow_unused=True)
    assert gx is not None and gx.abs().sum() > 0
    assert go is None or (go == 0).all()
    assert gr is None or (gr == 0).all()


# --- clipping -----------------------------------------------------------------------------------
def _tokens_with_ratios(ratios: list[float], advs: list[float]):
    """One sequence per (ratio, advantage) pair, T = 1, so each token is known."""
    old = torch.full((len(ratios), 1), -1.0, dtype=torch.float64)
    logp = old + torch.tensor(ratios, dtype=torch.float64).log().unsqueeze(-1)
    return logp, old, torch.tensor(advs, dtype=torch.float64), torch.ones(len(ratios), 1, dtype=torch.float64)


def test_clipfrac_counts_exactly_the_clipped_tokens():
    # A > 0 is clipped only above 1 + eps_high; A < 0 only below 1 - eps_low
    ratios = [0.5, 0.79, 0.9, 1.0, 1.1, 1.21, 1.5, 0.5, 0.79, 0.9, 1.1, 1.21, 1.5, 3.0]
    advs = [1.0] * 7 + [-1.0] * 6 + [0.0]
    expected_clipped = [0, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 0]
    logp, old, adv, mask = _tokens_with_ratios(ratios, advs)
    x = logp.clone().requires_grad_(True)
    loss, m = policy_loss(x, old, adv, mask, clip_low=0.2, clip_high=0.2)
    assert m["loss/clipfrac"] == pytest.approx(sum(expected_clipped) / len(ratios))
    assert m["loss/clipfrac_high"] == pytest.approx(2 / len(ratios))  # 1.21 and 1.5 with A > 0
    assert m["loss/clipfrac_low"] == pytest.approx(2 / len(ratios))  # 0.5 and 0.79 with A < 0
    (grad,) = torch.autograd.grad(loss, x)
    for g, c, r, a in zip(grad[:, 0].tolist(), expected_clipped, ratios, advs):
        if c:
            assert g == 0.0  # the clipped branch carries no gradient
        else:
            assert g == pytest.approx(-a * r / len(ratios), rel=1e-12)
    assert m["loss/ratio_max"] == pytest.approx(3.0)


def test_clipfrac_ignores_masked_tokens():
    logp, old, adv, _ = _tokens_with_ratios([1.5, 1.5, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0])
    logp, old = logp.reshape(1, 4), old.reshape(1, 4)
    adv = adv[:1]
    mask = torch.tensor([[0.0, 1.0, 1.0, 0.0]], dtype=torch.float64)
    _, m = policy_loss(logp, old, adv, mask)
    assert m["loss/clipfrac"] == pytest.approx(0.5)  # one clipped of two real tokens
    assert m["loss/tokens"] == 2.0


def test_clip_higher_is_asymmetric():
    ratios = [0.78, 1.25, 1.30]
    # eps_low = 0.2, eps_high = 0.28 (DAPO): 1.25 with A > 0 is inside the band now
    logp, old, adv, mask = _tokens_with_ratios(ratios, [1.0, 1.0, 1.0])
    _, sym = policy_loss(logp, old, adv, mask, clip_low=0.2, clip_high=0.2)
    _, asym = policy_loss(logp, old, adv, mask, clip_low=0.2, clip_high=0.28)
    assert sym["loss/clipfrac_high"] == pytest.approx(2 / 3)
    assert asym["loss/clipfrac_high"] == pytest.approx(1 / 3)
    # the low side is unchanged: 0.78 with A < 0 is clipped under both
    logp, old, adv, mask = _tokens_with_ratios(ratios, [-1.0, -1.0, -1.0])
    _, sym = policy_loss(logp, old, adv, mask, clip_low=0.2, clip_high=0.2)
    _, asym = policy_loss(logp, old, adv, mask, clip_low=0.2, clip_high=0.28)
    assert sym["loss/clipfrac_low"] == asym["loss/clipfrac_low"] == pytest.approx(1 / 3)
    # and a wider low side unclips it
    _, wide = policy_loss(logp, old, adv, mask, clip_low=0.25, clip_high=0.28)
    assert wide["loss/clipfrac_low"] == 0.0


def test_clipped_loss_value_uses_the_bound():
    logp, old, adv, mask = _tokens_with_ratios([2.0], [1.5])
    loss, _ = policy_loss(logp, old, adv, mask, clip_low=0.2, clip_high=0.28)
    assert loss.item() == pytest.approx(-1.5 * 1.28)
    logp, old, adv, mask = _tokens_with_ratios([0.1], [-1.5])
    loss, _ = policy_loss(logp, old, adv, mask, clip_low=0.2, clip_high=0.28)
    assert loss.item() == pytest.approx(1.5 * 0.8)


def test_masked_positions_may_hold_any_finite_values():
    # padding log-probs are whatever the model produced there; they must not leak into the loss
    logp, old, ref, adv, mask = random_case(random.Random(21))
    assert (mask == 0).any()
    noisy_logp, noisy_old, noisy_ref = logp.clone(), old.clone(), ref.clone()
    pad = mask == 0
    noisy_logp[pad], noisy_old[pad], noisy_ref[pad] = -1e4, 0.0, 500.0
    for agg in AGGREGATIONS:
        a, ma = policy_loss(logp, old, adv, mask, agg=agg, ref_logp=ref, beta=0.1)
        x = noisy_logp.clone().requires_grad_(True)
        b, mb = policy_loss(x, noisy_old, adv, mask, agg=agg, ref_logp=noisy_ref, beta=0.1)
        (g,) = torch.autograd.grad(b, x)
        assert torch.isfinite(b) and torch.isfinite(g).all()
        assert b.item() == pytest.approx(a.item(), rel=1e-12)
        assert mb["loss/kl"] == pytest.approx(ma["loss/kl"], rel=1e-12)
        assert mb["loss/ratio_max"] == pytest.approx(ma["loss/ratio_max"], rel=1e-12)
        assert mb["loss/approx_kl"] == pytest.approx(ma["loss/approx_kl"], rel=1e-12)
        assert (g[pad] == 0).all()


def test_bool_and_float_masks_agree():
    logp, old, ref, adv, mask = random_case(random.Random(8))
    a, _ = policy_loss(logp, old, adv, mask, ref_logp=ref, beta=0.1)
    b, _ = policy_loss(logp, old, adv, mask.bool(), ref_logp=ref, beta=0.1)
    assert a.item() == pytest.approx(b.item(), rel=1e-12)


# --- validation ---------------------------------------------------------------------------------
def _ok():
    logp = -torch.rand(2, 3)
    return logp, logp.clone(), torch.tensor([1.0, -1.0]), torch.ones(2, 3)


@pytest.mark.parametrize("name", ["old_logp", "mask", "ref_logp"])
def test_mismatched_token_shapes_name_the_argument(name):
    logp, old, adv, mask = _ok()
    kwargs = {"old_logp": old, "mask": mask, "ref_logp": logp.clone()}
    kwargs[name] = torch.zeros(2, 4)
    with pytest.raises(ValueError, match=rf"{name} has shape \(2, 4\) but logp has shape \(2, 3\)"):
        policy_loss(logp, kwargs["old_logp"], adv, kwargs["mask"], ref_logp=kwargs["ref_logp"])


def test_advantages_shape_must_be_batch():
    logp, old, _, mask = _ok()
    for bad in (torch.zeros(3), torch.zeros(2, 1)):
        with pytest.raises(ValueError, match=r"advantages must have shape \(B,\) = \(2,\)"):
            policy_loss(logp, old, bad, mask)


def test_logp_must_be_2d():
    with pytest.raises(ValueError, match=r"logp must be 2-D \(B, T\)"):
        policy_loss(torch.zeros(3), torch.zeros(3), torch.zeros(3), torch.ones(3))


def test_mask_with_no_tokens_raises():
    logp, old, adv, mask = _ok()
    with pytest.raises(ValueError, match=r"mask has no tokens"):
        policy_loss(logp, old, adv, torch.zeros_like(mask))


def test_unknown_agg_names_argument_and_choices():
    logp, old, adv, mask = _ok()
    with pytest.raises(ValueError) as e:
        policy_loss(logp, old, adv, mask, agg="sum")
    msg = str(e.value)
    assert "agg" in msg and "'sum'" in msg and all(repr(a) in msg for a in AGGREGATIONS)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_advantages_raise(bad):
    logp, old, _, mask = _ok()
    with pytest.raises(ValueError, match=r"advantages contains NaN or inf"):
        policy_loss(logp, old, torch.tensor([0.0, bad]), mask)


def test_beta_without_reference_raises():
    logp, old, adv, mask = _ok()
    with pytest.raises(ValueError, match=r"beta > 0 needs ref_logp"):
        policy_loss(logp, old, adv, mask, beta=0.1)
    with pytest.raises(ValueError, match=r"beta must be >= 0"):
        policy_loss(logp, old, adv, mask, ref_logp=logp, beta=-0.1)


@pytest.mark.parametrize("kw", [{"clip_low": 1.0}, {"clip_low": -0.1}, {"clip_high": -0.1}])
def test_bad_clip_ranges_raise(kw):
    logp, old, adv, mask = _ok()
    with pytest.raises(ValueError, match=r"clip_low must be in \[0, 1\) and clip_high >= 0"):
        policy_loss(logp, old, adv, mask, **kw)
