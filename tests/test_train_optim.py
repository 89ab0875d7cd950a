"""AdamW with bfloat16 moments (`optimizer_state: bf16`) against torch.optim.AdamW."""

from __future__ import annotations

import copy

import pytest
import torch

from tagrpo.train import optim
from tagrpo.train.optim import AdamWBF16State, to_bf16_stochastic

# both ways of running the step: the eager chunked ops and the compiled one-pass kernel
PATHS = pytest.mark.parametrize("compile", [False, True], ids=["eager", "fused"])


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


@PATHS
@pytest.mark.parametrize("wd", [0.0, 0.1])
def test_first_step_equals_torch_adamw(wd, compile):
    a, b = _pair()
    ours = AdamWBF16State([a], lr=1e-2, weight_decay=wd, compile=compile)
    ref = torch.optim.AdamW([b], lr=1e-2, weight_decay=wd)
    g = torch.randn_like(a)
    a.grad, b.grad = g.clone(), g.clone()
    ours.step()
    ref.step()
    torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)  # the step itself is float32
    assert ours.state[a]["exp_avg"].dtype == torch.bfloat16
    torch.testing.assert_close(ours.state[a]["exp_avg"].float(), ref.state[b]["exp_avg"], rtol=2**-7, atol=0)


@PATHS
def test_training_trajectory_follows_torch_adamw(compile):
    """300 steps of noisy gradients on a quadratic: parameters and moments stay close to float32
    AdamW's (the difference is < 1% of how far the parameters moved)."""
    a, b = _pair(1, (4096,))
    start = b.detach().clone()
    ours = AdamWBF16State([a], lr=1e-3, betas=(0.9, 0.999), chunk=1000, compile=compile)  # eager: several chunks
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


@PATHS
def test_second_moment_does_not_stall_where_round_to_nearest_would(compile):
    """A constant gradient of 1 with beta2 = 0.999: float32 v reaches 1 - 0.999^t. Rounded to
    nearest bfloat16 at every step it stops growing near 1/3 (each increment falls below half a
    bfloat16 step); stochastic rounding keeps it on course."""
    steps, b2 = 2000, 0.999
    p = torch.nn.Parameter(torch.zeros(2048))
    opt = AdamWBF16State([p], lr=1e-4, betas=(0.9, b2), compile=compile)
    v_nearest = torch.zeros(2048, dtype=torch.bfloat16)
    for _ in range(steps):
        p.grad = torch.ones_like(p)
        opt.step()
        v_nearest = (v_nearest.float() * b2 + (1 - b2)).to(torch.bfloat16)
    exact = 1 - b2**steps  # 0.865
    assert abs(float(opt.state[p]["exp_avg_sq"].float().mean()) / exact - 1) < 0.02
    assert float(v_nearest.float().mean()) < 0.6 * exact  # what plain bfloat16 storage would give


@PATHS
def test_zero_gradient_step_with_state_moves_like_torch_and_none_gradients_are_skipped(compile):
    a, b = _pair(3, (8, 8))
    ours, ref = AdamWBF16State([a], lr=1e-2, compile=compile), torch.optim.AdamW([b], lr=1e-2)
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


@PATHS
def test_moments_are_rounded_unbiased_onto_the_two_neighbours(compile):
    """A constant gradient makes every element's float32 moment the same value between two
    bfloat16 numbers: the stored moments take only those two values, with the float32 mean."""
    p = torch.nn.Parameter(torch.zeros(200_000))
    opt = AdamWBF16State([p], lr=1e-3, betas=(0.9, 0.999), compile=compile)
    p.grad = torch.full_like(p, (1.0 + 2**-10) / 0.1)  # m = 1 + 2^-10: 1/8 of a bfloat16 step above 1
    opt.step()
    m, v = opt.state[p]["exp_avg"].float(), opt.state[p]["exp_avg_sq"].float()
    assert set(m.unique().tolist()) == {1.0, 1.0 + 2**-7}
    assert abs(float(m.mean()) - (1.0 + 2**-10)) < 2e-5  # round-to-nearest would give exactly 1.0
    v32 = torch.tensor(0.001 * ((1.0 + 2**-10) / 0.1) ** 2).item()
    assert len(v.unique()) == 2 and abs(float(v.mean()) / v32 - 1) < 2e-4
    # the two moments' noise is not the same draw: their round-ups are uncorrelated
    up_m, up_v = (m > 1.0).float(), (v > v32).float()
    assert abs(float(torch.corrcoef(torch.stack([up_m, up_v]))[0, 1])) < 0.02


@PATHS
def test_a_resumed_optimizer_rounds_as_the_original(compile):
    a, _ = _pair(5, (300,))
    b = torch.nn.Parameter(a.detach().clone())
    first = AdamWBF16State([a], lr=1e-2, compile=compile)
    grads = [torch.randn_like(a) for _ in range(3)]
    a.grad = grads[0]
    first.step()
    resumed = AdamWBF16State([b], lr=1e-2, compile=compile)
    b.grad = grads[0]
    resumed.step()  # allocates the state, then overwritten by the checkpoint's
    resumed.load_state_dict(copy.deepcopy(first.state_dict()))  # as from a file: no shared tensors
    b.data.copy_(a.detach())
    for g in grads[1:]:
        a.grad, b.grad = g.clone(), g.clone()
        first.step(), resumed.step()
    assert torch.equal(a.detach(), b.detach())
    assert torch.equal(first.state[a]["exp_avg_sq"], resumed.state[b]["exp_avg_sq"])


def test_a_kernel_that_cannot_be_built_falls_back_to_the_eager_path_with_a_warning(monkeypatch):
    def broken(*args):
        raise RuntimeError("no C++ compiler found\nsecond line")

    a, b = _pair(6, (40,))
    monkeypatch.setitem(optim._COMPILED, "fn", broken)
    with pytest.raises(RuntimeError, match="no C\\+\\+ compiler"):  # compile=True: the error itself
        a.grad = torch.randn_like(a)
        AdamWBF16State([a], lr=1e-2, compile=True).step()
    ours, eager = AdamWBF16State([a], lr=1e-2), AdamWBF16State([b], lr=1e-2, compile=False)
    a.grad, b.grad = torch.randn_like(a), None
    b.grad = a.grad.clone()
    with pytest.warns(RuntimeWarning, match="fused AdamW kernel could not be built .*no C\\+\\+ compiler found\\); using the eager"):
        ours.step()
    eager.step()
    assert torch.equal(a.detach(), b.detach())  # the same eager step, same noise
    assert optim._COMPILED["fn"] is None  # not tried again


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
    with pytest.raises(TagrpoError, match="bf16_adamw_kernel.*'triton'.*auto, fused, eager"):
        TrainConfig(bf16_adamw_kernel="triton").validate()


def test_bf16_adamw_kernel_auto_builds_the_fused_kernel_only_for_runs_long_enough_to_pay_for_it():
    from tagrpo.train.config import TrainConfig
    from tagrpo.train.model import bf16_adamw_compile, make_optimizer

    assert bf16_adamw_compile("fused", 1, 10) is True and bf16_adamw_compile("eager", 10**4, 10**9) is False
    assert bf16_adamw_compile("auto", 6, 134_515_008) is False  # the demo: 6 updates of SmolLM2-135M
    assert bf16_adamw_compile("auto", 15, 134_515_008) is None  # fused, eager if it cannot be built
    model = torch.nn.Linear(4, 3)  # 15 parameters: auto stays eager however long the run
    opt, _ = make_optimizer(model, TrainConfig(optimizer_state="bf16", steps=1000).validate())
    assert opt.compile is False
    cfg = TrainConfig(optimizer_state="bf16", steps=2, ppo_epochs=2, bf16_adamw_kernel="fused").validate()
    assert make_optimizer(model, cfg)[0].compile is True


@pytest.mark.parametrize("kernel", ["eager", "fused"])
def test_trainer_trains_with_bf16_moments_and_rounding_is_reproducible(tmp_path, kernel):
    """A tiny run with optimizer_state: bf16 updates the weights, keeps bfloat16 moments, and two
    runs with the same seed end with the same weights (the rounding noise is seeded by step)."""
    from train_helpers import ROWS, tiny_cfg

    from tagrpo.train.trainer import Trainer

    finals = []
    for run in ("a", "b"):
        t = Trainer(tiny_cfg(tmp_path / run, "optimizer_state=bf16", f"bf16_adamw_kernel={kernel}", "steps=2"),
                    rows=copy.deepcopy(ROWS))
        t.setup()
        start = [p.detach().clone() for p in t.model.parameters()]
        t.train()
        inner = getattr(t.optimizer, "optimizer", t.optimizer)
        assert isinstance(inner, AdamWBF16State) and inner.compile is (kernel == "fused")
        assert all(s["exp_avg_sq"].dtype == torch.bfloat16 for s in inner.state.values())
        assert any(not torch.equal(a, p) for a, p in zip(start, t.model.parameters()))
        finals.append([p.detach().clone() for p in t.model.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*finals))
