"""group_advantages against a slow, obviously-correct loop, on random and hand-made inputs.

Covers the three scales (group / batch / none), groups given by arbitrary (shuffled,
non-contiguous, negative) ids, groups of one, uniform groups, TA-GRPO's joint family
normalization versus per-prompt normalization, input validation and hypothesis properties.
"""

from __future__ import annotations

import math
import random

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tagrpo.core import SCALES, group_advantages

EPS = 1e-6


# --- the reference ------------------------------------------------------------------------------
def ref_group_advantages(rewards: list[float], ids: list[int], scale: str, eps: float = EPS) -> list[float]:
    """Plain-Python loops: (r - mean_g) / (std_g + eps) with Bessel's correction."""
    members: dict[int, list[int]] = {}
    for i, g in enumerate(ids):
        members.setdefault(g, []).append(i)

    def mean(xs):
        return sum(xs) / len(xs)

    def sample_std(xs):
        m = mean(xs)
        return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0

    batch_std = sample_std(rewards)
    out = []
    for i, g in enumerate(ids):
        group = [rewards[j] for j in members[g]]
        if len(group) == 1 or all(x == group[0] for x in group):
            out.append(0.0)
            continue
        centered = rewards[i] - mean(group)
        if scale == "group":
            out.append(centered / (sample_std(group) + eps))
        elif scale == "batch":
            out.append(centered / (batch_std + eps))
        else:
            out.append(centered)
    return out


def random_batch(rng: random.Random, max_groups: int = 8):
    """Uneven groups of size 1..16 with shuffled, non-contiguous ids; a mix of binary rewards,
    continuous rewards and forced all-equal groups."""
    n_groups = rng.randint(1, max_groups)
    labels = rng.sample(range(-1000, 1000), n_groups)  # arbitrary, non-contiguous, some negative
    rewards, ids = [], []
    for g in labels:
        size = rng.randint(1, 16)
        kind = rng.choice(["binary", "continuous", "equal", "equal-binary"])
        for _ in range(size):
            if kind == "binary":
                rewards.append(float(rng.random() < 0.5))
            elif kind == "continuous":
                rewards.append(rng.uniform(-3.0, 3.0))
            ids.append(g)
        if kind == "equal":
            rewards.extend([rng.uniform(-3.0, 3.0)] * size)
        elif kind == "equal-binary":
            rewards.extend([float(rng.random() < 0.5)] * size)
    order = list(range(len(rewards)))
    rng.shuffle(order)  # rows of a group are scattered through the batch
    return [rewards[i] for i in order], [ids[i] for i in order]


# --- against the reference ----------------------------------------------------------------------
@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("seed", range(40))
def test_matches_loop_reference_on_random_batches(scale, seed):
    rng = random.Random(seed)
    rewards, ids = random_batch(rng)
    got = group_advantages(torch.tensor(rewards, dtype=torch.float64), torch.tensor(ids), scale=scale)
    want = torch.tensor(ref_group_advantages(rewards, ids, scale), dtype=torch.float64)
    assert got.dtype == torch.float64 and got.shape == (len(rewards),)
    torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("scale", SCALES)
def test_float32_rewards_keep_dtype_and_match(scale):
    rng = random.Random(123)
    rewards, ids = random_batch(rng, max_groups=16)
    got = group_advantages(torch.tensor(rewards, dtype=torch.float32), torch.tensor(ids), scale=scale)
    assert got.dtype == torch.float32
    r32 = torch.tensor(rewards, dtype=torch.float32).double().tolist()  # the values actually passed
    want = torch.tensor(ref_group_advantages(r32, ids, scale), dtype=torch.float32)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("size", range(1, 17))
def test_every_group_size_1_to_16(scale, size):
    rng = random.Random(size)
    rewards = [rng.uniform(0, 1) for _ in range(size)] + [1.0, 0.0, 0.0]
    ids = [7] * size + [3, 3, 3]
    got = group_advantages(torch.tensor(rewards, dtype=torch.float64), torch.tensor(ids), scale=scale)
    want = ref_group_advantages(rewards, ids, scale)
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64), rtol=1e-9, atol=1e-9)


def test_hand_computed_values():
    # group 5: rewards 1, 0, 0, 1 -> mean 0.5, sample std sqrt(1/3)
    r = torch.tensor([1.0, 0.0, 0.0, 1.0], dtype=torch.float64)
    ids = torch.tensor([5, 5, 5, 5])
    a = group_advantages(r, ids, scale="group", eps=0.0)
    s = math.sqrt(1 / 3)
    torch.testing.assert_close(a, torch.tensor([0.5 / s, -0.5 / s, -0.5 / s, 0.5 / s], dtype=torch.float64))
    torch.testing.assert_close(group_advantages(r, ids, scale="none"), r - 0.5)


def test_bessel_correction_and_eps_are_applied():
    r = torch.tensor([2.0, 0.0], dtype=torch.float64)  # mean 1, sample std sqrt(2) (population std 1)
    ids = torch.tensor([0, 0])
    a = group_advantages(r, ids, scale="group", eps=0.5)
    expected = 1.0 / (math.sqrt(2.0) + 0.5)
    torch.testing.assert_close(a, torch.tensor([expected, -expected], dtype=torch.float64))


def test_batch_scale_uses_one_std_for_all_groups():
    r = torch.tensor([1.0, 0.0, 5.0, 3.0, 4.0], dtype=torch.float64)
    ids = torch.tensor([0, 0, 1, 1, 1])
    a = group_advantages(r, ids, scale="batch", eps=0.0)
    centered = torch.tensor([0.5, -0.5, 1.0, -1.0, 0.0], dtype=torch.float64)
    torch.testing.assert_close(a, centered / r.std(unbiased=True))


def test_group_of_one_gets_zero_under_every_scale():
    r = torch.tensor([0.3, 1.0, 0.0, 7.0], dtype=torch.float64)
    ids = torch.tensor([1, 2, 2, 3])  # groups 1 and 3 have one member
    for scale in SCALES:
        a = group_advantages(r, ids, scale=scale)
        assert a[0].item() == 0.0 and a[3].item() == 0.0
        assert a[1].item() > 0 > a[2].item()
    assert group_advantages(torch.tensor([4.0]), torch.tensor([0])).tolist() == [0.0]


@pytest.mark.parametrize("value", [0.0, 1.0, 0.1, 0.7, 1 / 3, 123.456, 1000.1, -2.2])
@pytest.mark.parametrize("scale", SCALES)
def test_uniform_group_is_exactly_zero(value, scale):
    # an ulp of error in the float mean divided by eps would leave a "signal" of ~1e-10..1e-7
    for n in (2, 3, 7, 16):
        r = torch.full((n,), value, dtype=torch.float64)
        a = group_advantages(r, torch.zeros(n, dtype=torch.long), scale=scale)
        assert a.abs().max().item() == 0.0


def test_row_order_does_not_matter():
    rng = random.Random(7)
    rewards, ids = random_batch(rng)
    r, g = torch.tensor(rewards, dtype=torch.float64), torch.tensor(ids)
    perm = torch.randperm(len(rewards), generator=torch.Generator().manual_seed(0))
    for scale in SCALES:
        torch.testing.assert_close(group_advantages(r, g, scale)[perm], group_advantages(r[perm], g[perm], scale))


def test_only_id_equality_matters():
    rng = random.Random(11)
    rewards, ids = random_batch(rng)
    relabel = {g: 10_000 + 37 * k for k, g in enumerate(sorted(set(ids), reverse=True))}
    r = torch.tensor(rewards, dtype=torch.float64)
    a = group_advantages(r, torch.tensor(ids))
    b = group_advantages(r, torch.tensor([relabel[g] for g in ids]))
    torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_integer_rewards_are_accepted():
    a = group_advantages(torch.tensor([1, 0, 1, 1]), torch.tensor([0, 0, 0, 0]))
    assert a.is_floating_point()
    torch.testing.assert_close(a.double(), torch.tensor(ref_group_advantages([1, 0, 1, 1], [0] * 4, "group"), dtype=torch.float64), rtol=1e-6, atol=1e-6)


def test_empty_batch_gives_empty_advantages():
    a = group_advantages(torch.zeros(0), torch.zeros(0, dtype=torch.long))
    assert a.shape == (0,)


def test_gradient_does_not_flow_back_into_rewards():
    # advantages are constants of the loss: rewards that require grad (a learned reward model's
    # output) must not let the policy gradient flow into them
    r = torch.rand(12, dtype=torch.float64, requires_grad=True)
    a = group_advantages(r, torch.arange(12) % 3)
    assert a.shape == r.shape and not a.requires_grad


# --- TA-GRPO: joint family normalization --------------------------------------------------------
def make_families(rng: random.Random, n_families: int, n_neighbors: int, g: int, p_correct: list[float]):
    """Rewards for (N+1)*G responses per family; returns rewards, prompt ids, family ids."""
    rewards, prompt_ids, family_ids = [], [], []
    for f in range(n_families):
        for v in range(n_neighbors + 1):
            p = p_correct[(f + v) % len(p_correct)]
            for _ in range(g):
                rewards.append(float(rng.random() < p))
                prompt_ids.append(f * (n_neighbors + 1) + v)
                family_ids.append(f)
    return rewards, prompt_ids, family_ids


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("seed", range(10))
def test_joint_normalization_equals_per_prompt_when_no_neighbors(scale, seed):
    rng = random.Random(seed)
    rewards, prompt_ids, family_ids = make_families(rng, n_families=6, n_neighbors=0, g=8, p_correct=[0.0, 0.3, 0.7, 1.0])
    # with N = 0 the family of q0 is q0 itself: family ids are prompt ids under another labeling
    assert len(set(zip(prompt_ids, family_ids))) == len(set(prompt_ids)) == len(set(family_ids))
    r = torch.tensor(rewards, dtype=torch.float64)
    joint = group_advantages(r, torch.tensor(family_ids) * 13 + 5, scale=scale)
    per_prompt = group_advantages(r, torch.tensor(prompt_ids), scale=scale)
    torch.testing.assert_close(joint, per_prompt, rtol=0, atol=0)


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("seed", range(10))
def test_joint_normalization_matches_loop_over_families(scale, seed):
    rng = random.Random(100 + seed)
    n = rng.randint(1, 4)
    rewards, _, family_ids = make_families(rng, n_families=5, n_neighbors=n, g=rng.randint(2, 8), p_correct=[0.0, 0.2, 0.9, 1.0, 0.5])
    order = list(range(len(rewards)))
    rng.shuffle(order)
    rewards = [rewards[i] for i in order]
    family_ids = [family_ids[i] for i in order]
    got = group_advantages(torch.tensor(rewards, dtype=torch.float64), torch.tensor(family_ids), scale=scale)
    want = ref_group_advantages(rewards, family_ids, scale)
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64), rtol=1e-9, atol=1e-9)


def test_family_rescues_a_uniform_prompt():
    # q0: all 4 wrong (GRPO: no signal); neighbor q1: 2 of 4 right -> the family is not uniform,
    # so q0's wrong answers get a negative advantage under TA-GRPO.
    rewards = torch.tensor([0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0])
    prompt_ids = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    family_ids = torch.zeros(8, dtype=torch.long)
    grpo = group_advantages(rewards, prompt_ids)
    ta = group_advantages(rewards, family_ids)
    assert grpo[:4].abs().max().item() == 0.0
    assert (ta[:4] < 0).all()
    torch.testing.assert_close(ta, torch.tensor(ref_group_advantages(rewards.tolist(), [0] * 8, "group"), dtype=torch.float32))


# --- validation ---------------------------------------------------------------------------------
def test_unknown_scale_names_argument_and_choices():
    with pytest.raises(ValueError) as e:
        group_advantages(torch.tensor([1.0, 0.0]), torch.tensor([0, 0]), scale="std")
    msg = str(e.value)
    assert "scale" in msg and "'std'" in msg
    for s in SCALES:
        assert repr(s) in msg


def test_mismatched_shapes_raise():
    with pytest.raises(ValueError, match=r"rewards.*\(3,\).*group_ids.*\(2,\)"):
        group_advantages(torch.tensor([1.0, 0.0, 1.0]), torch.tensor([0, 0]))


def test_two_dimensional_rewards_raise():
    with pytest.raises(ValueError, match=r"rewards must be 1-D"):
        group_advantages(torch.ones(2, 3), torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"group_ids must be 1-D"):
        group_advantages(torch.ones(6), torch.zeros(2, 3, dtype=torch.long))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_rewards_raise(bad):
    with pytest.raises(ValueError, match=r"rewards contains NaN or inf.*index \[2\]"):
        group_advantages(torch.tensor([1.0, 0.0, bad, 1.0]), torch.tensor([0, 0, 1, 1]))


def test_float_group_ids_and_non_tensors_raise():
    with pytest.raises(ValueError, match="group_ids must be an integer tensor"):
        group_advantages(torch.tensor([1.0, 0.0]), torch.tensor([0.0, 0.0]))
    with pytest.raises(ValueError, match="rewards must be a torch.Tensor"):
        group_advantages([1.0, 0.0], torch.tensor([0, 0]))


def test_negative_eps_raises():
    with pytest.raises(ValueError, match="eps must be >= 0"):
        group_advantages(torch.tensor([1.0, 0.0]), torch.tensor([0, 0]), eps=-1.0)


# --- properties (hypothesis) --------------------------------------------------------------------
@st.composite
def batches(draw, min_spread: float = 0.0):
    """(rewards, ids) with 1..6 groups of 1..16 members each, ids non-contiguous and shuffled."""
    n_groups = draw(st.integers(1, 6))
    labels = draw(st.lists(st.integers(-10**6, 10**6), min_size=n_groups, max_size=n_groups, unique=True))
    rewards, ids = [], []
    for g in labels:
        size = draw(st.integers(1, 16))
        vals = draw(st.lists(st.floats(-10, 10, allow_nan=False, width=64), min_size=size, max_size=size))
        if min_spread and size > 1:
            assume(max(vals) - min(vals) >= min_spread)
        rewards += vals
        ids += [g] * size
    perm = draw(st.permutations(list(range(len(rewards)))))
    return [rewards[i] for i in perm], [ids[i] for i in perm]


def _group_sums(adv: torch.Tensor, ids: list[int]) -> dict[int, float]:
    sums: dict[int, float] = {}
    for a, g in zip(adv.tolist(), ids):
        sums[g] = sums.get(g, 0.0) + a
    return sums


@settings(max_examples=100, deadline=None)
@given(batches(), st.sampled_from(SCALES))
def test_property_each_group_sums_to_zero(batch, scale):
    rewards, ids = batch
    adv = group_advantages(torch.tensor(rewards, dtype=torch.float64), torch.tensor(ids), scale=scale)
    for g, total in _group_sums(adv, ids).items():
        n = ids.count(g)
        # (r - mean) sums to 0 up to rounding; the std divisor can be as small as eps
        bound = 1e-9 * n * (1 + max(abs(x) for x, i in zip(rewards, ids) if i == g)) / (EPS if scale != "none" else 1)
        assert abs(total) <= bound


@settings(max_examples=100, deadline=None)
@given(batches(min_spread=0.5), st.floats(0.01, 100.0))
def test_property_positive_scaling_leaves_group_scale_unchanged(batch, c):
    rewards, ids = batch
    r = torch.tensor(rewards, dtype=torch.float64)
    g = torch.tensor(ids)
    a = group_advantages(r, g, scale="group")
    b = group_advantages(r * c, g, scale="group")
    # exact but for eps: (r - m) / (s + eps) vs (r - m) / (s + eps / c), a relative change of at
    # most ~eps / (min(c, 1) * s) with s the smallest group std (>= ~0.09 given the spread)
    stds = [torch.tensor([x for x, i in zip(rewards, ids) if i == gid], dtype=torch.float64).std().item()
            for gid in set(ids) if ids.count(gid) > 1]
    rtol = 2 * EPS / (min(c, 1.0) * min(stds)) if stds else 0.0
    torch.testing.assert_close(a, b, rtol=rtol + 1e-12, atol=1e-12)


@settings(max_examples=100, deadline=None)
@given(batches(), st.floats(-50.0, 50.0), st.sampled_from(SCALES))
def test_property_adding_a_constant_changes_nothing(batch, c, scale):
    rewards, ids = batch
    r = torch.tensor(rewards, dtype=torch.float64)
    g = torch.tensor(ids)
    a = group_advantages(r, g, scale=scale)
    b = group_advantages(r + c, g, scale=scale)
    # exact up to the rounding of r + c (an ulp of 60 is 7e-15), amplified at most by 1 / eps
    torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


@settings(max_examples=100, deadline=None)
@given(batches(min_spread=0.5))
def test_property_group_scaled_advantages_have_unit_sample_std(batch):
    rewards, ids = batch
    adv = group_advantages(torch.tensor(rewards, dtype=torch.float64), torch.tensor(ids), scale="group")
    for gid in set(ids):
        vals = [a for a, i in zip(adv.tolist(), ids) if i == gid]
        if len(vals) > 1:
            m = sum(vals) / len(vals)
            sd = math.sqrt(sum((v - m) ** 2 for v in vals) / (len(vals) - 1))
            assert sd == pytest.approx(1.0, abs=1e-4)
