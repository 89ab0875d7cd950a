"""The update's invariants: what it logs and the gradient it takes do not depend on how rows
are packed or skipped; the LR schedule; AdamW with zero gradients; old and reference log-probs
anchored on q0 with several epochs and mini-batches; per-row rollout seeds; non-finite rewards."""

from __future__ import annotations

import copy

import pytest
import torch

from tagrpo.errors import TagrpoError
from tagrpo.train import update as U
from tagrpo.train.config import load_config
from tagrpo.train.model import lr_lambda
from tagrpo.train.trainer import Trainer
from train_helpers import ROWS, direct_logp, tiny_cfg

AGGS = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
LOSS = ("loss/policy", "loss/kl", "loss/total")


def _trainer(tmp_path, *ov):
    t = Trainer(tiny_cfg(tmp_path, *ov), rows=copy.deepcopy(ROWS))
    t.setup()
    return t


def _count_micro_batches(monkeypatch):
    calls = []
    real = U._forward

    def spy(learner, model, rows, mb, *a, **k):
        if torch.is_grad_enabled():
            calls.append(len(mb))
        return real(learner, model, rows, mb, *a, **k)

    monkeypatch.setattr(U, "_forward", spy)
    return calls


def _assert_same_grads(a, b):
    for (n, pa), (_, pb) in zip(a.model.named_parameters(), b.model.named_parameters()):
        scale = float(pb.grad.abs().max()) + 1e-12
        torch.testing.assert_close(pa.grad / scale, pb.grad / scale, atol=2e-5, rtol=0, msg=n)


@pytest.mark.parametrize("shared", ["true", "false"])
@pytest.mark.parametrize("agg", AGGS)
def test_gradient_and_logged_loss_do_not_depend_on_micro_batching(tmp_path, monkeypatch, agg, shared):
    common = (f"agg={agg}", f"shared_prefix={shared}", "skip_zero_adv=false", "beta=0.05", "questions_per_step=2")
    a = _trainer(tmp_path / "a", *common, "micro_batch_tokens=100000")
    b = _trainer(tmp_path / "b", *common, "micro_batch_tokens=48")
    calls = _count_micro_batches(monkeypatch)
    ma = a.train_step(0)
    n_one = len(calls)
    mb = b.train_step(0)
    assert n_one == 1 and len(calls) - n_one > 2, calls  # one micro-batch vs several
    _assert_same_grads(a, b)
    for k in (*LOSS, "loss/clipfrac", "loss/ratio_mean"):
        assert mb[k] == pytest.approx(ma[k], abs=1e-6), k
    assert any(float(p.grad.abs().max()) > 0 for p in a.model.parameters())


@pytest.mark.parametrize("agg", AGGS)
def test_skipping_zero_advantage_rows_changes_neither_gradient_nor_logged_loss(tmp_path, agg):
    common = (f"agg={agg}", "reward=tagrpo.rewards.toy:parity_on_even_answers", "questions_per_step=4")
    a = _trainer(tmp_path / "a", *common, "skip_zero_adv=true", "micro_batch_tokens=64")
    b = _trainer(tmp_path / "b", *common, "skip_zero_adv=false", "micro_batch_tokens=100000")
    ma, mb = a.train_step(0), b.train_step(0)
    assert 0 < ma["train/rows_skipped_zero_adv"] < ma["train/rows"]
    _assert_same_grads(a, b)
    for k in LOSS:
        assert ma[k] == pytest.approx(mb[k], abs=1e-6), k


def test_sum_norm_divides_by_the_response_budget_not_the_padded_width():
    from tagrpo.core import aggregate, policy_loss

    vals = torch.tensor([[1.0, 2.0, 0.0], [3.0, 0.0, 0.0]])  # (2, 3)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    assert aggregate(vals, mask, "seq-mean-token-sum-norm", norm_len=10).item() == pytest.approx((3 / 10 + 3 / 10) / 2)
    assert aggregate(vals, mask, "seq-mean-token-sum-norm").item() == pytest.approx((3 / 3 + 3 / 3) / 2)
    # the same rows padded to another width give the same loss once norm_len is fixed
    lp = torch.randn(2, 3)
    wide = torch.cat([lp, torch.zeros(2, 5)], 1)
    adv = torch.tensor([1.0, -1.0])
    a, _ = policy_loss(lp, lp + 0.1, adv, mask, agg="seq-mean-token-sum-norm", norm_len=16)
    b, _ = policy_loss(wide, wide + 0.1, adv, torch.cat([mask, torch.zeros(2, 5)], 1), agg="seq-mean-token-sum-norm", norm_len=16)
    assert a.item() == pytest.approx(b.item())
    with pytest.raises(ValueError, match="norm_len"):
        aggregate(vals, mask, "seq-mean-token-sum-norm", norm_len=0)


def test_lr_follows_the_schedule_at_every_step_and_reaches_its_end(tmp_path):
    steps, per = 4, 2 * 2
    t = _trainer(tmp_path, f"steps={steps}", "schedule=cosine", "warmup_ratio=0.25", "ppo_epochs=2", "num_mini_batches=2",
                 "filter_uniform=true", "reward=tagrpo.rewards.toy:parity_on_even_answers", "lr=0.001")
    f = lr_lambda("cosine", round(0.25 * steps * per), steps * per)
    seen = []
    for s in range(steps):
        m = t.train_step(s)
        seen.append(m["train/rows"])
        assert m["actor/lr"] == pytest.approx(0.001 * f(s * per), rel=1e-9), s
    assert t.scheduler.last_epoch == steps * per  # stepped a fixed number of times, whatever was trained
    assert t.scheduler.get_last_lr()[0] == pytest.approx(0.0, abs=1e-12)  # cosine reached its end


def test_a_step_with_every_row_skipped_still_steps_adamw_like_a_zero_gradient(tmp_path):
    from tagrpo.train.rewards import RewardRunner

    a = _trainer(tmp_path / "a", "skip_zero_adv=true", "steps=2")
    b = _trainer(tmp_path / "b", "skip_zero_adv=false", "steps=2")
    a.train_step(0), b.train_step(0)  # parity reward: non-zero advantages, AdamW state builds up
    after0 = {n: p.detach().clone() for n, p in a.model.named_parameters()}
    for t in (a, b):
        t.rewarder = RewardRunner("tagrpo.rewards:math_reward")  # a random model is never right: all advantages 0
    ma, mb = a.train_step(1), b.train_step(1)
    assert ma["train/rows_skipped_zero_adv"] == ma["train/rows"] > 0
    assert any(not torch.equal(p, after0[n]) for n, p in a.model.named_parameters()), "AdamW momentum must still move weights"
    for (_, pa), (_, pb) in zip(a.model.named_parameters(), b.model.named_parameters()):
        torch.testing.assert_close(pa, pb, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("algorithm", ["ta-grpo", "ta-grpo-unanchored"])
def test_old_and_reference_logprobs_are_anchored_with_several_epochs_and_mini_batches(tmp_path, algorithm):
    t = _trainer(tmp_path, f"algorithm={algorithm}", "beta=0.1", "ppo_epochs=2", "num_mini_batches=2", "skip_zero_adv=false")
    before = copy.deepcopy(t.acc.unwrap_model(t.model)).eval()
    t.train_step(0)
    up = t.last_update
    assert up["old"] is not None and up["ref"] is not None
    assert t.scheduler.last_epoch == 4  # 2 epochs x 2 mini-batches optimizer steps
    state = next(iter(t.optimizer.state.values()))
    assert int(state["step"]) == 4
    nb = [i for i, s in enumerate(up["samples"]) if s.variant > 0]
    assert nb
    for i in nb:
        s = up["samples"][i]
        on_q0 = direct_logp(before, s.anchor_prompt_ids, s.response_ids)
        on_qn = direct_logp(before, s.gen_prompt_ids, s.response_ids)
        ref_q0 = direct_logp(t.ref_model, s.anchor_prompt_ids, s.response_ids)
        expect = on_q0 if algorithm == "ta-grpo" else on_qn
        torch.testing.assert_close(up["old"][i], expect, atol=1e-4, rtol=1e-4)
        ref_expect = ref_q0 if algorithm == "ta-grpo" else direct_logp(t.ref_model, s.gen_prompt_ids, s.response_ids)
        torch.testing.assert_close(up["ref"][i], ref_expect, atol=1e-4, rtol=1e-4)
        assert not torch.allclose(up["old"][i], on_qn if algorithm == "ta-grpo" else on_q0, atol=1e-3)


def test_group_ids_under_on_uniform_augmentation(tmp_path):
    t = _trainer(tmp_path, "augment=on-uniform", "reward=tagrpo.rewards.toy:parity_on_even_answers", "questions_per_step=4")
    samples, _, _ = t.rollout(0, t.families_for_step(0))
    t.compute_advantages(samples)
    kinds = set()
    for f in {s.family for s in samples}:
        fs = [s for s in samples if s.family == f]
        q0 = [s.reward for s in fs if s.variant == 0]
        augmented = len(set(q0)) == 1
        kinds.add(augmented)
        assert {s.variant for s in fs} == ({0, 1, 2} if augmented else {0})
        assert {s.adv_group for s in fs} == {f}  # one group per family, augmented or not
        assert all(s.extra["augmented"] == augmented for s in fs)
        assert abs(sum(s.adv for s in fs)) < 1e-4
    assert kinds == {True, False}, "the test needs augmented and plain families"


def test_rollouts_do_not_depend_on_generate_batch_size(tmp_path):
    a = _trainer(tmp_path / "a", "generate_batch_size=6", "questions_per_step=4")  # one family per call
    b = _trainer(tmp_path / "b", "generate_batch_size=64", "questions_per_step=4")  # all families in one call
    sa, _, _ = a.rollout(0, a.families_for_step(0))
    sb, _, _ = b.rollout(0, b.families_for_step(0))
    key = lambda s: (s.family, s.variant, s.gen_prompt_ids)  # noqa: E731
    assert [key(s) for s in sa] == [key(s) for s in sb]
    assert [s.response_ids for s in sa] == [s.response_ids for s in sb]
    assert len({tuple(s.response_ids) for s in sa}) > 1


def test_nonfinite_rewards_score_zero_and_are_counted(tmp_path):
    t = _trainer(tmp_path, "reward=train_helpers:inf_on_even_hash")
    m = t.train_step(0)
    assert m["reward/nonfinite"] > 0
    assert all(torch.isfinite(torch.tensor(s.reward)) for s in t.last_update["samples"])


def test_config_refuses_batch_scaling_over_processes_and_warns_on_ta_grpo_without_neighbors(tmp_path):
    with pytest.raises(TagrpoError, match="adv_scale"):
        load_config(None, ["adv_scale=batch", "questions_per_step=4"], world_size=2)
    assert load_config(None, ["adv_scale=batch"], world_size=1).adv_scale == "batch"
    cfg = load_config(None, ["algorithm=ta-grpo", "num_neighbors=0"])
    assert any("plain GRPO" in w for w in cfg.warnings())
    assert not load_config(None, ["algorithm=ta-grpo"]).warnings()
    with pytest.raises(TagrpoError, match="device"):
        load_config(None, ["device=tpu"])


@pytest.mark.parametrize("mode", ["full", "selective"])
def test_gradient_checkpointing_gives_the_same_gradient(tmp_path, monkeypatch, mode):
    from tagrpo.train import packed_prefix

    # a prompt's responses in blocks of one row (for this tiny model the cost model picks full rows)
    monkeypatch.setattr(packed_prefix, "blocks_per_row", lambda *a, **kw: 99)
    a = _trainer(tmp_path / "a", "gradient_checkpointing=true", "skip_zero_adv=false", f"gradient_checkpointing_mode={mode}")
    b = _trainer(tmp_path / "b", "gradient_checkpointing=false", "shared_prefix=false", "skip_zero_adv=false")
    assert a.shared_prefix and a.learner.packed_prefix  # each prompt once, its responses in masked blocks
    base = a.acc.unwrap_model(a.model)
    assert any(getattr(m, "gradient_checkpointing", False) for m in base.modules())
    assert any(getattr(m, "_tagrpo_keep", False) for m in base.modules()) is (mode == "selective")
    ma, mb = a.train_step(0), b.train_step(0)
    _assert_same_grads(a, b)
    assert ma["loss/policy"] == pytest.approx(mb["loss/policy"], abs=1e-6)
    assert ma["train/computed_tokens_fwd_bwd"] < mb["train/computed_tokens_fwd_bwd"]  # prompts not repeated


def test_autocast_auto_is_bf16_only_where_bf16_is_fast(monkeypatch):
    from tagrpo.train import model as M

    cpu = torch.device("cpu")
    assert M.bf16_is_fast(torch.device("meta")) is False
    cfg = load_config(None, [])
    assert cfg.autocast == "auto"
    monkeypatch.setattr(M, "bf16_is_fast", lambda d: False)
    assert not M.use_bf16(cfg, cpu)
    assert M.use_bf16(load_config(None, ["autocast=bf16"]), cpu)  # asked for explicitly
    monkeypatch.setattr(M, "bf16_is_fast", lambda d: True)
    assert M.use_bf16(cfg, cpu)
    assert not M.use_bf16(load_config(None, ["autocast=none"]), cpu)


def test_cpu_bf16_units_are_read_from_cpuinfo_flags():
    """oneDNN reports bf16 support on any AVX-512 CPU, but only AMX / AVX512_BF16 (Arm: bf16)
    make bf16 matmuls faster than fp32; without them `autocast: auto` must stay fp32."""
    from tagrpo.train.model import cpu_has_bf16_units

    avx512 = "processor\t: 0\nflags\t\t: fpu sse avx avx2 avx512f avx512bw avx512vl avx512_vnni avx512_bitalg\n"
    assert not cpu_has_bf16_units(avx512)
    assert not cpu_has_bf16_units("flags\t\t: fpu sse avx avx2 fma\n")
    assert cpu_has_bf16_units(avx512.replace("avx512_vnni", "avx512_vnni avx512_bf16"))
    assert cpu_has_bf16_units("flags\t\t: avx512f amx_tile amx_bf16 amx_int8\n")
    assert cpu_has_bf16_units("processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\n")
    assert not cpu_has_bf16_units("Features\t: fp asimd evtstrm\n")
    assert not cpu_has_bf16_units("model name\t: bf16 in a name is not a flag\n")
    assert not cpu_has_bf16_units("")


def test_lean_cpu_gradients_are_one_mapped_buffer_freed_for_the_rollout_and_match_freed_ones(tmp_path, monkeypatch):
    """On a CPU with gradient_checkpointing (and keep_freed_memory) an update's gradients are views
    of one buffer in its own memory map, unmapped before the next rollout (the rollout runs
    without them, and the heap is not fragmented by them); the update they produce is the one of
    gradients freed and reallocated on the heap (keep_freed_memory false)."""
    common = ("skip_zero_adv=false", "questions_per_step=2", "steps=2", "gradient_checkpointing=true")
    a = _trainer(tmp_path / "a", *common)
    b = _trainer(tmp_path / "b", *common, "keep_freed_memory=false")
    assert a.learner.flat_grads and not b.learner.flat_grads
    assert not _trainer(tmp_path / "c", "steps=2").learner.flat_grads  # only with checkpointing (lean memory)
    seen = {"a": [], "b": []}
    for name, t in (("a", a), ("b", b)):
        real = t.engine.generate

        def spy(*args, _t=t, _real=real, _name=name, **kw):
            seen[_name].append(all(p.grad is None for p in _t.model.parameters()) and _t.learner.grad_buffers is None)
            return _real(*args, **kw)

        monkeypatch.setattr(t.engine, "generate", spy)
    import tagrpo._malloc as M

    mapped = []
    real_mz = M.mapped_zeros
    monkeypatch.setattr(M, "mapped_zeros", lambda *args: mapped.append(real_mz(*args)) or mapped[-1])
    for step in range(2):
        a.train_step(step), b.train_step(step)
        _assert_same_grads(a, b)
        buf = a.learner.grad_buffers[0]
        assert buf is mapped[-1]  # the buffer is the memory map
        lo, hi = buf.data_ptr(), buf.data_ptr() + buf.numel() * buf.element_size()
        assert all(lo <= p.grad.data_ptr() < hi for p in a.model.parameters())  # every .grad is a view of it
    assert len(mapped) == 2  # one map per update
    assert seen == {"a": [True, True], "b": [True, True]}  # gradients are released before each rollout
    for (n, pa), (_, pb) in zip(a.model.named_parameters(), b.model.named_parameters()):
        torch.testing.assert_close(pa, pb, atol=1e-6, rtol=0, msg=n)


def test_mapped_zeros_is_zero_writable_and_goes_back_to_the_system_when_freed():
    """tagrpo._malloc.mapped_zeros: zeros of the asked dtype and length, writable through views,
    and its memory leaves the resident size when the last view is freed, even with
    keep_freed_memory's no-trim heap (where a freed heap tensor stays resident)."""
    import psutil

    from tagrpo._malloc import keep_freed_memory, mapped_zeros

    keep_freed_memory()
    proc = psutil.Process()
    assert mapped_zeros(0, torch.float32).shape == (0,)
    buf = mapped_zeros(3, torch.bfloat16)
    assert buf.dtype == torch.bfloat16 and buf.tolist() == [0.0, 0.0, 0.0]
    n = 64 * 2**20 // 4  # 64 MiB of float32
    buf = mapped_zeros(n, torch.float32)
    view = buf[n // 2 :].view(2, -1)
    assert float(buf.abs().sum()) == 0.0
    buf.fill_(1.0)
    view.mul_(2.0)
    assert float(buf[: n // 2].sum()) == n // 2 and float(buf[n // 2 :].sum()) == n
    held = proc.memory_info().rss
    del buf
    assert proc.memory_info().rss > held - 16 * 2**20  # a view still holds the map
    del view
    assert proc.memory_info().rss < held - 48 * 2**20  # unmapped


def test_lean_cpu_memory_releases_the_bf16_rollout_copy_for_the_update(tmp_path, monkeypatch):
    """With gradient_checkpointing on a CPU (lean memory) and bf16 rollouts, the engine's bf16
    copy holds no weights while the update runs, and each rollout samples from a fresh cast of
    the current weights; without lean memory the copy stays."""
    common = ("skip_zero_adv=false", "questions_per_step=2", "steps=2", "autocast=bf16")
    lean = _trainer(tmp_path / "a", *common, "gradient_checkpointing=true")
    kept = _trainer(tmp_path / "b", *common)
    import tagrpo.train.loop as L

    during_update = []
    real = L.ppo_update

    def spy(learner, rows, cfg):
        during_update.append([p.numel() for p in lean.engine._copy.parameters()])
        return real(learner, rows, cfg)

    monkeypatch.setattr(L, "ppo_update", spy)
    copies = []
    real_copy = lean.engine._rollout_model

    def copy_spy(*args, **kw):  # the copy a rollout samples from, as it starts (its packed weights are freed after prefill)
        out = real_copy(*args, **kw)
        copies.append([(a.float() - b.detach().to(torch.bfloat16).float()).abs().max().item()
                       for a, b in zip(lean.engine._copy.parameters(), lean.model.parameters())])
        return out

    monkeypatch.setattr(lean.engine, "_rollout_model", copy_spy)
    for step in range(2):
        lean.train_step(step)
    assert len(during_update) == 2 and all(n == 0 for ns in during_update for n in ns)
    assert len(copies) >= 2 and all(d == 0.0 for ds in copies for d in ds)  # the cast of the weights it sampled from
    monkeypatch.setattr(L, "ppo_update", real)
    kept.train_step(0)
    assert all(p.numel() > 0 for p in kept.engine._copy.parameters())


@pytest.mark.parametrize("lean", [True, False])
def test_lean_cpu_memory_trims_the_heap_after_every_backward_and_only_then(tmp_path, monkeypatch, lean):
    """With lean CPU memory (gradient_checkpointing, keep_freed_memory) the heap's free pages go
    back to the system after each micro-batch's backward (the activations of one micro-batch
    leave holes the next one cannot reuse); without it the update never trims."""
    ov = ("skip_zero_adv=false", "questions_per_step=2", "steps=1", "micro_batch_tokens=32")
    t = _trainer(tmp_path, *ov, *(("gradient_checkpointing=true",) if lean else ()))
    assert t.learner.trim_heap is lean
    import tagrpo._malloc as M

    backwards, trims = [], []
    real_backward = U.Learner.backward

    def backward_spy(self, loss):
        backwards.append(len(trims))
        real_backward(self, loss)

    monkeypatch.setattr(U.Learner, "backward", backward_spy)
    monkeypatch.setattr(M, "release_free_memory", lambda: trims.append(1) or True)
    monkeypatch.setattr(t, "release_free_memory", lambda: None)  # the between-phase trims: counted elsewhere
    t.train_step(0)
    assert len(backwards) > 1  # several micro-batches
    assert len(trims) == (len(backwards) if lean else 0)
    if lean:  # one trim after each backward, before the next one
        assert backwards == list(range(len(backwards)))


@pytest.mark.parametrize("algorithm", ["ta-grpo", "ta-grpo-unanchored", "grpo"])
def test_logged_logprobs_split_on_policy_from_anchored_rows(tmp_path, algorithm):
    """train/logp_on_policy and train/logp_anchored: the mean per-token log-prob before the
    update, under the prompt each row is trained on; anchored = sampled for a neighbor, trained on q0."""
    t = _trainer(tmp_path, f"algorithm={algorithm}", "skip_zero_adv=false")
    before = copy.deepcopy(t.acc.unwrap_model(t.model)).eval()
    m = t.train_step(0)
    groups: dict[bool, list] = {False: [], True: []}
    for s in t.last_update["samples"]:
        anchored = algorithm == "ta-grpo" and s.variant > 0
        prompt = s.anchor_prompt_ids if algorithm != "ta-grpo-unanchored" else s.gen_prompt_ids
        groups[anchored].append(direct_logp(before, prompt, s.response_ids))
    on = torch.cat(groups[False])
    assert m["train/logp_on_policy"] == pytest.approx(float(on.mean()), abs=1e-4)
    if algorithm == "ta-grpo":
        anchored = torch.cat(groups[True])
        assert m["train/logp_anchored"] == pytest.approx(float(anchored.mean()), abs=1e-4)
        assert m["train/logp_anchored"] != pytest.approx(m["train/logp_on_policy"], abs=1e-3)
    else:
        assert m["train/logp_anchored"] != m["train/logp_anchored"]  # NaN: no anchored rows


def test_anchor_gap_watch_warns_once_after_a_full_window_above_the_threshold():
    from tagrpo.train.metrics import AnchorGapWatch

    w = AnchorGapWatch(threshold=2.0, window=3)
    step = lambda i, on, anc: w.update({"step": i, "train/logp_on_policy": on, "train/logp_anchored": anc})
    assert step(1, -0.2, -3.0) is None  # 2.8, but the window is not full yet
    assert step(2, -0.2, -0.5) is None
    assert step(3, -0.2, float("nan")) is None  # no anchored rows: not counted
    assert step(4, -0.2, -3.0) is None  # mean(2.8, 0.3, 2.8) = 1.97 < 2
    msg = step(5, -0.2, -3.4)  # mean(0.3, 2.8, 3.2) = 2.1
    assert msg is not None and "step 5" in msg and "2.1 nats/token" in msg
    assert step(6, -0.2, -9.0) is None  # once only


@pytest.mark.parametrize("algorithm", ["ta-grpo", "grpo"])
def test_trainer_prints_the_anchor_gap_warning_for_anchored_rows_only(tmp_path, algorithm):
    from tagrpo.train.metrics import AnchorGapWatch

    t = _trainer(tmp_path, f"algorithm={algorithm}", "skip_zero_adv=false", "save_every=0", "save_final=false")
    t.anchor_watch = AnchorGapWatch(threshold=-100.0, window=1)  # any gap: the tiny model's is small
    said: list[str] = []
    t._say = said.append
    t.train()
    warnings = [s for s in said if "nats/token less likely under q0" in s]
    assert len(warnings) == (1 if algorithm == "ta-grpo" else 0)
