"""AdamW with bfloat16 moments (`optimizer_state: bf16`) against torch.optim.AdamW."""

from __future__ import annotations

import pytest
import torch

from tagrpo.train.optim import AdamWBF16State, to_bf16_stochastic


def test_stochastic_rounding_is_unbiased_and_lands_on_the_two_neighbours():
    x = torch.full((200_000,), 1.0 + 2**-10)  # 1/8 of the way from 1.0 to the next bfloat16 (1 + 2^-7)
    g = torch.Generator().manual_seed(0)
    y = to_bf16_stochastic(x, g).float()
    assert set(y.unique().tolist()) == {1.0, 1.0 + 2**-7}
    assert abs(float(y.mean()) - (1.0 + 2**-10)) < 2e-5  # round-to-nearest would give exactly 1.0
    exact = torch.tensor([0.0, -2.0, 1.5, 3.0])  # bfloat16 values pass unchanged
    assert torch.equal(to_bf16_stochastic(exact).float(), exact)


def _pair(seed=0, shape=(64, 33)):
    torch.manual_seed(seed)
    a = torch.nn.Parameter(torch.randn(shape))
    b = torch.nn.Parameter(a.detach().clone())
    return a, b


@pytest.mark.parametrize("wd", [0.0, 0.1])
def test_first_step_equals_torch_adamw(wd):
    a, b = _pair()
    ours = AdamWBF16State([a], lr=1e-2, weight_decay=wd)
    ref = torch.optim.AdamW([b], lr=1e-2, weight_decay=wd)
    g = torch.randn_like(a)
    a.grad, b.grad = g.clone(), g.clone()
    ours.step()
    ref.step()
    torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)  # the step itself is float32
    assert ours.state[a]["exp_avg"].dtype == torch.bfloat16
    torch.testing.assert_close(ours.state[a]["exp_avg"].float(), ref.state[b]["exp_avg"], rtol=2**-7, atol=0)


def test_training_trajectory_follows_torch_adamw():
    """300 steps of noisy gradients on a quadratic: parameters and moments stay close to float32
    AdamW's (the difference is < 1% of how far the parameters moved)."""
    a, b = _pair(1, (4096,))
    start = b.detach().clone()
    ours = AdamWBF16State([a], lr=1e-3, betas=(0.9, 0.999), chunk=1000)  # several chunks per tensor
    ref = torch.optim.AdamW([b], lr=1e-3, betas=(0.9, 0.999))
    gen = torch.Generator().manual_seed(2)
    for _ in range(300):
        noise = torch.randn(a.shape, generator=gen)
        a.grad = (a.detach() + noise).clone()
        b.grad = (b.detach() + noise).clone()
        ours.step()
        ref.step()
    moved = float((b.detach() - start).abs().mean())
    assert moved > 0.1
    assert float((a.detach() - b.detach()).abs().mean()) < 0.01 * moved
    v_ours, v_ref = ours.state[a]["exp_avg_sq"].float(), ref.state[b]["exp_avg_sq"]
    assert abs(float(v_ours.mean() / v_ref.mean()) - 1) < 0.01


def test_second_moment_does_not_stall_where_round_to_nearest_would():
    """A constant gradient of 1 with beta2 = 0.999: float32 v reaches 1 - 0.999^t. Rounded to
    nearest bfloat16 at every step it stops growing near 1/3 (each increment falls below half a
    bfloat16 step); stochastic rounding keeps it on course."""
    steps, b2 = 2000, 0.999
    p = torch.nn.Parameter(torch.zeros(2048))
    opt = AdamWBF16State([p], lr=1e-4, betas=(0.9, b2))
    v_nearest = torch.zeros(2048, dtype=torch.bfloat16)
    for _ in range(steps):
        p.grad = torch.ones_like(p)
        opt.step()
        v_nearest = (v_nearest.float() * b2 + (1 - b2)).to(torch.bfloat16)
    exact = 1 - b2**steps  # 0.865
    assert abs(float(opt.state[p]["exp_avg_sq"].float().mean()) / exact - 1) < 0.02
    assert float(v_nearest.float().mean()) < 0.6 * exact  # what plain bfloat16 storage would give


def test_zero_gradient_step_with_state_moves_like_torch_and_none_gradients_are_skipped():
    a, b = _pair(3, (8, 8))
    ours, ref = AdamWBF16State([a], lr=1e-2), torch.optim.AdamW([b], lr=1e-2)
    g = torch.randn_like(a)
    a.grad, b.grad = g.clone(), g.clone()
    ours.step(), ref.step()
    a.grad, b.grad = torch.zeros_like(a), torch.zeros_like(b)
    before = a.detach().clone()
    ours.step(), ref.step()
    assert not torch.equal(a.detach(), before)  # momentum keeps moving it
    torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    a.grad = None
    before = a.detach().clone()
    ours.step()
    assert torch.equal(a.detach(), before)


def test_state_dict_round_trip_keeps_bf16_moments():
    a, _ = _pair(4, (16,))
    opt = AdamWBF16State([a], lr=1e-2)
    a.grad = torch.randn_like(a)
    opt.step()
    sd = opt.state_dict()
    fresh = AdamWBF16State([a], lr=1e-2)
    fresh.load_state_dict(sd)
    st = fresh.state[a]
    assert st["exp_avg"].dtype == st["exp_avg_sq"].dtype == torch.bfloat16
    assert torch.equal(st["exp_avg"], opt.state[a]["exp_avg"]) and float(st["step"]) == 1.0


def test_config_selects_the_optimizer_and_rejects_unknown_states():
    from tagrpo.errors import TagrpoError
    from tagrpo.train.config import TrainConfig
    from tagrpo.train.model import make_optimizer

    model = torch.nn.Linear(4, 3)
    opt, _ = make_optimizer(model, TrainConfig(optimizer_state="bf16", steps=2).validate())
    assert isinstance(opt, AdamWBF16State)
    opt, _ = make_optimizer(model, TrainConfig(steps=2).validate())
    assert isinstance(opt, torch.optim.AdamW)
    with pytest.raises(TagrpoError, match="optimizer_state.*fp32, bf16"):
        TrainConfig(optimizer_state="int8").validate()


def test_trainer_trains_with_bf16_moments_and_rounding_is_reproducible(tmp_path):
    """A tiny run with optimizer_state: bf16 updates the weights, keeps bfloat16 moments, and two
    runs with the same seed end with the same weights (the rounding noise is seeded by step)."""
    import copy

    from train_helpers import ROWS, tiny_cfg

    from tagrpo.train.trainer import Trainer

    finals = []
    for run in ("a", "b"):
        t = Trainer(tiny_cfg(tmp_path / run, "optimizer_state=bf16", "steps=2"), rows=copy.deepcopy(ROWS))
        t.setup()
        start = [p.detach().clone() for p in t.model.parameters()]
        t.train()
        inner = getattr(t.optimizer, "optimizer", t.optimizer)
        assert isinstance(inner, AdamWBF16State)
        assert all(s["exp_avg_sq"].dtype == torch.bfloat16 for s in inner.state.values())
        assert any(not torch.equal(a, p) for a, p in zip(start, t.model.parameters()))
        finals.append([p.detach().clone() for p in t.model.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*finals))
