"""The trainer's algorithm switch: anchoring, N=0 equivalence, parameter updates, reference model."""

from __future__ import annotations

import copy

import pytest
import torch

from tagrpo.train import logprobs as L
from tagrpo.train.trainer import Trainer
from train_helpers import ROWS, direct_logp, tiny_cfg


def _trainer(tmp_path, *ov, rows=ROWS):
    t = Trainer(tiny_cfg(tmp_path, *ov), rows=copy.deepcopy(rows))
    t.setup()
    return t


@pytest.mark.parametrize("shared", ["true", "false"])
@pytest.mark.parametrize("algorithm", ["ta-grpo", "ta-grpo-unanchored"])
def test_logprobs_are_anchored_on_q0(tmp_path, algorithm, shared):
    t = _trainer(tmp_path, f"algorithm={algorithm}", f"shared_prefix={shared}", "skip_zero_adv=false")
    before = copy.deepcopy(t.acc.unwrap_model(t.model)).eval()
    t.train_step(0)
    up = t.last_update
    samples = up["samples"]
    neighbor_rows = [i for i, s in enumerate(samples) if s.variant > 0]
    assert neighbor_rows, "TA-GRPO must sample neighbor variants"
    for i in neighbor_rows:
        s = samples[i]
        assert s.gen_prompt_ids != s.anchor_prompt_ids
        on_q0 = direct_logp(before, s.anchor_prompt_ids, s.response_ids)
        on_qn = direct_logp(before, s.gen_prompt_ids, s.response_ids)
        used = up["logp"][i]
        expected, other = (on_q0, on_qn) if algorithm == "ta-grpo" else (on_qn, on_q0)
        assert up["prompts"][i] == (s.anchor_prompt_ids if algorithm == "ta-grpo" else s.gen_prompt_ids)
        torch.testing.assert_close(used, expected, atol=1e-4, rtol=1e-4)
        assert not torch.allclose(used, other, atol=1e-3), "log-probs should depend on the prompt"


def test_variants_and_family_grouping(tmp_path):
    t = _trainer(tmp_path, "algorithm=ta-grpo")
    fams = t.families_for_step(0)
    samples, _, _ = t.rollout(0, fams)
    t.compute_advantages(samples)
    # (N+1)*G per family: variants 0..N, G each, all normalized as one family
    for f, _ in fams:
        fs = [s for s in samples if s.family == f]
        assert sorted(s.variant for s in fs) == [0, 0, 1, 1, 2, 2]
        assert len({s.adv_group for s in fs}) == 1
        assert abs(sum(s.adv for s in fs)) < 1e-4
        assert {tuple(s.gen_prompt_ids) for s in fs} == {tuple(p) for p in fams[[x for x, _ in fams].index(f)][1]["prompts"]}


def test_separate_ablation_normalizes_per_prompt(tmp_path):
    t = _trainer(tmp_path, "algorithm=ta-grpo-separate")
    samples, _, _ = t.rollout(0, t.families_for_step(0))
    t.compute_advantages(samples)
    groups = {}
    for s in samples:
        groups.setdefault(s.adv_group, []).append(s)
    assert len(groups) == 2 * 3
    for g in groups.values():
        assert len({(s.family, s.variant) for s in g}) == 1
        assert abs(sum(s.adv for s in g)) < 1e-4


def test_grpo_matched_samples_q0_only_with_ta_budget(tmp_path):
    t = _trainer(tmp_path, "algorithm=grpo-matched")
    samples, _, _ = t.rollout(0, t.families_for_step(0))
    assert len(samples) == 2 * 3 * 2
    assert all(s.gen_prompt_ids == s.anchor_prompt_ids for s in samples)


def test_grpo_and_ta_grpo_with_zero_neighbors_give_identical_updates(tmp_path):
    a = _trainer(tmp_path / "a", "algorithm=grpo", "num_neighbors=0")
    b = _trainer(tmp_path / "b", "algorithm=ta-grpo", "num_neighbors=0")
    ma, mb = a.train_step(0), b.train_step(0)
    assert ma["reward/mean"] == mb["reward/mean"]
    for (na, pa), (nb, pb) in zip(a.model.named_parameters(), b.model.named_parameters()):
        assert na == nb
        torch.testing.assert_close(pa, pb, atol=0, rtol=0)


def test_one_step_changes_parameters_and_not_the_reference(tmp_path):
    t = _trainer(tmp_path, "algorithm=ta-grpo", "beta=0.1")
    before = {n: p.detach().clone() for n, p in t.model.named_parameters()}
    ref_before = {n: p.detach().clone() for n, p in t.ref_model.named_parameters()}
    m = t.train_step(0)
    assert m["adv/nonzero_frac"] > 0
    changed = [n for n, p in t.model.named_parameters() if not torch.equal(p, before[n])]
    assert changed, "a step with non-zero advantages must change the policy"
    for n, p in t.ref_model.named_parameters():
        assert torch.equal(p, ref_before[n]), f"reference parameter {n} changed"
    assert m["loss/kl"] >= 0


def test_lora_changes_only_adapter_weights(tmp_path):
    t = _trainer(tmp_path, "algorithm=ta-grpo", "lora=true", "lora_r=4", "beta=0.1", "lr=0.05")
    assert t.ref_model is None  # the reference is the base model with the adapter disabled
    before = {n: p.detach().clone() for n, p in t.model.named_parameters()}
    t.train_step(0)
    t.train_step(1)  # LoRA B starts at zero: A gets gradient only from step 2 on
    changed = {n for n, p in t.model.named_parameters() if not torch.equal(p, before[n])}
    assert changed and all("lora_" in n for n in changed), changed


def test_filter_uniform_drops_uniform_families(tmp_path):
    t = _trainer(tmp_path, "algorithm=ta-grpo", "filter_uniform=true", "reward=tagrpo.rewards:math_reward")
    m = t.train_step(0)  # a random tiny model is never right: every family is uniform
    assert m["uniform/family"] == 1.0
    assert m["train/rows"] == 0 and m.get("train/skipped_empty") == 1.0


def test_on_uniform_augments_only_uniform_questions(tmp_path):
    t = _trainer(tmp_path, "algorithm=ta-grpo", "augment=on-uniform", "reward=tagrpo.rewards:math_reward")
    samples, _, _ = t.rollout(0, t.families_for_step(0))
    # all q0 groups are uniform (all wrong) for a random model, so every family got its neighbors
    assert {s.variant for s in samples} == {0, 1, 2}
    t2 = _trainer(tmp_path / "b", "algorithm=ta-grpo", "augment=on-uniform", "samples_per_variant=4")
    s2, _, _ = t2.rollout(0, t2.families_for_step(0))
    for f in {s.family for s in s2}:
        q0 = [s.reward for s in s2 if s.family == f and s.variant == 0]
        has_nb = any(s.variant > 0 for s in s2 if s.family == f)
        assert has_nb == (len(set(q0)) == 1)


def test_missing_neighbors_is_a_clear_error(tmp_path):
    from tagrpo.errors import TagrpoError

    rows = [dict(r, neighbors=r["neighbors"][:1]) for r in ROWS]
    with pytest.raises(TagrpoError, match="row 1.*num_neighbors=2.*1 neighbors"):
        _trainer(tmp_path, "algorithm=ta-grpo", rows=rows)


def test_long_prompt_and_missing_answer_rows_are_reported_and_skipped(tmp_path):
    rows = copy.deepcopy(ROWS) + [{"id": 9, "question": "word " * 400, "answer": "1", "neighbors": ["a", "b"]},
                                  {"id": 10, "question": "What?", "answer": "", "neighbors": ["a", "b"]}]
    t = _trainer(tmp_path, "algorithm=ta-grpo", "max_prompt_tokens=128", rows=rows)
    assert len(t.data) == len(ROWS)
    assert any("max_prompt_tokens" in s for s in t.skipped_rows)
    assert any("no usable answer" in s for s in t.skipped_rows)


def test_nonfinite_loss_skips_the_update(tmp_path, monkeypatch):
    t = _trainer(tmp_path, "algorithm=ta-grpo")
    before = {n: p.detach().clone() for n, p in t.model.named_parameters()}
    import tagrpo.core as core

    real = core.policy_loss

    def nan_loss(*a, **k):
        loss, m = real(*a, **k)
        return loss * float("nan"), m

    monkeypatch.setattr(core, "policy_loss", nan_loss)
    m = t.train_step(0)
    assert m["train/nonfinite_skips"] == 1
    for n, p in t.model.named_parameters():
        assert torch.equal(p, before[n])


def test_shared_prefix_matches_full_sequences_in_value_and_gradient(tmp_path):
    t = _trainer(tmp_path, "algorithm=ta-grpo")
    prompt = t.data[0]["prompts"][0]
    responses = [[5, 6, 7, 8], [9, 10], [11, 12, 13, 14, 15, 16], [3]]
    model = t.model
    _assert_same_values_and_gradients(model, lambda: _logprobs(t, [prompt] * len(responses), responses, True),
                                      lambda: _logprobs(t, [prompt] * len(responses), responses, False))


def _logprobs(t, prompts, responses, shared):
    return L.response_logprobs(t.model, prompts, responses, pad_id=t.tokenizer.pad_token_id, device=t.device,
                               temperature=t.cfg.temperature, shared_prefix=shared)


def _assert_same_values_and_gradients(model, forward_a, forward_b):
    """Two ways of computing (logp, mask, entropy): equal masked log-probs and parameter grads."""
    vals, grads = [], []
    for forward in (forward_a, forward_b):
        model.zero_grad()
        logp, mask, _ = forward()
        (logp * mask).sum().backward()
        vals.append((logp * mask).detach())
        grads.append({n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None})
    torch.testing.assert_close(vals[0], vals[1], atol=1e-5, rtol=1e-4)
    assert grads[0].keys() == grads[1].keys()
    for n in grads[0]:
        torch.testing.assert_close(grads[0][n], grads[1][n], atol=1e-5, rtol=1e-3)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_shared_prefix_with_several_prompts_matches_full_sequences(tmp_path, attn):
    # one forward for several prompts of different lengths (left padded), each response reading
    # its own prompt's KV rows: values and gradients equal to full (prompt + response) rows
    t = _trainer(tmp_path, "algorithm=ta-grpo")
    t.model.set_attn_implementation(attn)
    prompts = [t.data[0]["prompts"][0], t.data[1]["prompts"][0], t.data[0]["prompts"][1]]
    assert len({len(p) for p in prompts}) > 1, "the test needs prompts of different lengths"
    responses = [[5, 6, 7, 8], [9, 10], [11, 12, 13, 14, 15, 16], [3], [17, 18, 19]]
    groups = [2, 0, 1, 0, 2]
    model = t.model
    per_row = [prompts[g] for g in groups]
    _assert_same_values_and_gradients(model, lambda: _logprobs(t, per_row, responses, True),
                                      lambda: _logprobs(t, per_row, responses, False))


@pytest.mark.parametrize("attn", ["eager", "sdpa", "tagrpo_eager"])
@pytest.mark.parametrize("checkpointing", [False, True])
def test_packed_shared_prefix_matches_full_sequences(tmp_path, attn, checkpointing, monkeypatch):
    # the shared prefix as one forward with a block mask (what gradient checkpointing uses):
    # prompts of different lengths, different numbers of responses each, one empty response;
    # all of a prompt's responses in one row (the cost model would give this tiny model full rows)
    monkeypatch.setattr(L.packed_prefix, "blocks_per_row", lambda *a, **kw: 99)
    t = _trainer(tmp_path, "algorithm=ta-grpo")
    t.model.set_attn_implementation(attn)
    if checkpointing:
        t.model.train()
        enable = getattr(t.model, "activation_checkpointing_enable", None) or t.model.gradient_checkpointing_enable
        enable({"use_reentrant": False})
    prompts = [t.data[0]["prompts"][0], t.data[1]["prompts"][0], t.data[0]["prompts"][1]]
    assert len({len(p) for p in prompts}) > 1, "the test needs prompts of different lengths"
    responses = [[5, 6, 7, 8], [9, 10], [11, 12, 13, 14, 15, 16], [3], [17, 18, 19], [], [20]]
    per_row = [prompts[g] for g in [2, 0, 1, 0, 2, 0, 0]]

    def packed():
        return L.response_logprobs(t.model, per_row, responses, pad_id=t.tokenizer.pad_token_id, device=t.device,
                                   temperature=t.cfg.temperature, shared_prefix=True, packed=True)

    _assert_same_values_and_gradients(t.model, packed, lambda: _logprobs(t, per_row, responses, False))
    logp, mask, _ = packed()
    assert mask.shape == (7, 6) and mask[5].sum() == 0 and mask[0].sum() == 4


def test_packed_inputs_block_mask_reads_the_prompt_and_its_own_block_only():
    from tagrpo.train.packed_prefix import packed_inputs

    x = packed_inputs([[7, 8, 9], [4]], [[1, 2], [3], [5, 6]], [0, 0, 1], pad_id=0, device="cpu")
    m = x["mask"][:, 0]  # (k, L, L), L = Pm 3 + 2 blocks x T' 2 = 7
    assert x["ids"].tolist() == [[7, 8, 9, 1, 2, 3, 0], [0, 0, 4, 5, 6, 0, 0]]
    assert x["pos"].tolist() == [[0, 1, 2, 3, 4, 3, 4], [0, 0, 0, 1, 2, 1, 2]]
    assert m[0, 5].tolist() == [True, True, True, False, False, True, False]  # block 1 reads the prompt and itself
    assert m[0, 4].tolist() == [True, True, True, True, True, False, False]  # block 0: prompt, causal in block
    assert m[1, 3].tolist() == [False, False, True, True, False, False, False]  # left padding is never read
    assert x["keep"] == 5 and x["cols"].tolist() == [[0, 1], [0, 3], [0, 1]] and x["rows"][:, 0].tolist() == [0, 0, 1]


def test_packed_rows_split_a_prompts_responses_where_the_cost_model_says_so(tmp_path, monkeypatch):
    from tagrpo.train.packed_prefix import blocks_per_row, packed_inputs

    lin, att = 7e6, 2304.0  # SmolLM2-135M's coefficients
    assert blocks_per_row([16], 80, 64, lin, att, 9) == 8  # short answers: a prompt for every 8
    assert blocks_per_row([16], 80, 512, lin, att, 9) == 1  # long ones: the L^2 term makes full rows cheaper
    assert blocks_per_row([16], 80, 64, lin, att, 9, max_scores=4 * 9 * 336**2) == 4  # scores capped: 4 rows of 4
    assert blocks_per_row([16], 80, 512, lin, att, 9, blocks=True) == 16  # block by block: no L^2 term, one row
    assert blocks_per_row([16, 1], 80, 64, lin, att, 9, blocks=True) == 4  # rows share a width: not 15 empty blocks
    x = packed_inputs([[7, 8], [4]], [[1], [2], [3], [5]], [0, 0, 0, 1], pad_id=0, device="cpu", per_row=2)
    assert x["ids"].tolist() == [[7, 8, 1, 2], [7, 8, 3, 0], [0, 4, 5, 0]]  # 3 responses of prompt 0: two rows
    assert x["rows"][:, 0].tolist() == [0, 0, 1, 2]
    # values and gradients of split rows equal full rows
    t = _trainer(tmp_path, "algorithm=ta-grpo")
    prompt = t.data[0]["prompts"][0]
    responses = [[5, 6, 7, 8], [9, 10], [11, 12, 13, 14, 15, 16], [3], [17]]
    model = t.model
    monkeypatch.setattr(L.packed_prefix, "blocks_per_row", lambda *a, **kw: 2)  # 5 responses: rows of 2, 2, 1
    _assert_same_values_and_gradients(
        model, lambda: L.response_logprobs(model, [prompt] * 5, responses, pad_id=t.tokenizer.pad_token_id,
                                           device=t.device, temperature=t.cfg.temperature, shared_prefix=True, packed=True),
        lambda: _logprobs(t, [prompt] * 5, responses, False))


@pytest.mark.parametrize("autocast", [False, True])
def test_blocks_attention_equals_eager_under_the_dense_block_mask(autocast):
    # tagrpo_eager's packed branch against transformers' eager attention with block_mask: left
    # padded prompts, right padded responses, grouped-query heads; values and gradients of q, k, v
    from transformers.models.llama.modeling_llama import eager_attention_forward

    from tagrpo.train.packed_prefix import LAYOUT_KWARG, additive, blocks_attention, packed_inputs

    class Attn(torch.nn.Module):
        num_key_value_groups = 2

    module = Attn()
    prompts = [[7, 8, 9, 10, 11], [4, 5]]
    responses = [[1, 2, 3], [3], [5, 6], [6, 6, 6], [2]]
    x = packed_inputs(prompts, responses, [0, 0, 0, 1, 1], pad_id=0, device="cpu")
    blocks = packed_inputs(prompts, responses, [0, 0, 0, 1, 1], pad_id=0, device="cpu", dense=False)
    assert blocks["mask"].shape == (2, 1, 1, 5) and blocks["mask"][1, 0, 0].tolist() == [False] * 3 + [True] * 2
    g = torch.Generator().manual_seed(0)
    n = x["ids"].shape[1]  # 5 + 3 blocks x 3
    q, k, v = (torch.randn(2, h, n, 8, generator=g, requires_grad=True) for h in (4, 2, 2))
    keep = x["ids"] != 0  # real tokens: only their outputs are used
    out = {}
    for name in ("blocks", "dense"):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            if name == "blocks":
                o, _ = blocks_attention(module, q, k, v, blocks["mask"], scaling=0.3, **{LAYOUT_KWARG: blocks["layout"]})
            else:
                o, _ = eager_attention_forward(module, q, k, v, additive(x["mask"]), scaling=0.3)
        o = o.float()[keep]  # (real tokens, heads, d)
        grads = torch.autograd.grad((o * torch.linspace(-1, 1, o.numel()).view_as(o)).sum(), (q, k, v))
        out[name] = (o, grads)
    tol = dict(rtol=2e-2, atol=2e-2) if autocast else dict(rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out["blocks"][0], out["dense"][0], **tol)
    for a, b in zip(out["blocks"][1], out["dense"][1]):
        torch.testing.assert_close(a, b, **tol)
    with pytest.raises(ValueError, match="sliding windows"):
        blocks_attention(module, q, k, v, blocks["mask"], scaling=0.3, sliding_window=4, **{LAYOUT_KWARG: blocks["layout"]})


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_tagrpo_eager_is_the_models_eager_and_its_packed_prefix_equals_full_rows(family):
    # ordinary forwards: the model's own eager attention (Qwen3 normalizes q and k first); the
    # packed prefix block by block: the log-probs of full (prompt + response) rows
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    from tagrpo.train.packed_prefix import register_kernel

    torch.manual_seed(0)
    kw = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=128)
    model = (LlamaForCausalLM(LlamaConfig(**kw)) if family == "llama" else Qwen3ForCausalLM(Qwen3Config(head_dim=8, **kw))).eval()
    ids = torch.randint(1, 64, (2, 9))
    model.set_attn_implementation("eager")
    ref = model(ids).logits
    model.set_attn_implementation(register_kernel())
    torch.testing.assert_close(model(ids).logits, ref, rtol=0, atol=0)
    prompts = [[5, 6, 7, 8], [9, 10]]
    responses = [[11, 12, 13], [14], [15, 16], [17, 18, 19, 20]]
    per_row = [prompts[g] for g in (0, 0, 1, 1)]
    packed, mask, _ = L.response_logprobs(model, per_row, responses, pad_id=0, device=torch.device("cpu"),
                                          shared_prefix=True, packed=True)
    model.set_attn_implementation("eager")
    full, _, _ = L.response_logprobs(model, per_row, responses, pad_id=0, device=torch.device("cpu"))
    torch.testing.assert_close(packed * mask, full * mask, rtol=1e-5, atol=1e-5)


def test_shared_prefix_packing_puts_several_prompts_in_one_micro_batch(tmp_path):
    rows = [([1] * 10, [2] * 5, 0.0), ([3] * 8, [2] * 4, 0.0), ([1] * 10, [2] * 3, 0.0), ([3] * 8, [2] * 5, 0.0),
            ([4] * 12, [2] * 20, 0.0)]
    from tagrpo.train.update import pack

    packs = pack(rows, list(range(len(rows))), 60, shared_prefix=True)
    assert sorted(i for mb in packs for i in mb) == list(range(len(rows)))  # every row exactly once
    for mb in packs:  # within budget: prompts x longest prompt + rows x longest response
        distinct = {tuple(rows[i][0]) for i in mb}
        cost = len(distinct) * max(len(p) for p in distinct) + len(mb) * max(len(rows[i][1]) for i in mb)
        assert cost <= 60 or len(mb) == 1
    assert any(len({tuple(rows[i][0]) for i in mb}) > 1 for mb in packs), packs  # prompts share a micro-batch


def test_shared_prefix_on_and_off_give_the_same_update(tmp_path):
    a = _trainer(tmp_path / "a", "algorithm=ta-grpo", "shared_prefix=true")
    b = _trainer(tmp_path / "b", "algorithm=ta-grpo", "shared_prefix=false")
    a.train_step(0)
    b.train_step(0)
    # the same gradient up to float summation order (both prompts of a micro-batch in one forward
    # vs full rows) ...
    for (n, pa), (_, pb) in zip(a.model.named_parameters(), b.model.named_parameters()):
        scale = float(pb.grad.abs().max()) + 1e-12
        torch.testing.assert_close(pa.grad / scale, pb.grad / scale, atol=1e-5, rtol=0, msg=n)
    # ... hence the same update: lr 0.01 AdamW moves every weight by ~1e-2; 1e-3 leaves room for
    # Adam's amplification of float noise in near-zero gradient entries, and none for another update
    for (_, pa), (_, pb) in zip(a.model.named_parameters(), b.model.named_parameters()):
        torch.testing.assert_close(pa, pb, atol=1e-3, rtol=1e-4)


@pytest.mark.parametrize("reward", ["tagrpo.rewards.toy:parity_on_even_answers", "tagrpo.rewards:math_reward"])
def test_skipping_zero_advantage_rows_gives_the_same_update(tmp_path, reward):
    a = _trainer(tmp_path / "a", "skip_zero_adv=true", f"reward={reward}", "questions_per_step=4", "steps=2")
    b = _trainer(tmp_path / "b", "skip_zero_adv=false", f"reward={reward}", "questions_per_step=4", "steps=2")
    for step in range(2):
        ma, mb = a.train_step(step), b.train_step(step)
        assert ma["reward/mean"] == mb["reward/mean"]
        assert ma["loss/policy"] == pytest.approx(mb["loss/policy"], abs=1e-6)
        if step == 0:  # the same gradient from the same weights, up to float summation order
            for (n, pa), (_, pb) in zip(a.model.named_parameters(), b.model.named_parameters()):
                scale = float(pb.grad.abs().max()) + 1e-12
                torch.testing.assert_close(pa.grad / scale, pb.grad / scale, atol=1e-5, rtol=0, msg=n)
    if reward.endswith("math_reward"):
        assert ma["train/rows_skipped_zero_adv"] == ma["train/rows"]  # a random model is never right
    else:
        assert 0 < ma["train/rows_skipped_zero_adv"] < ma["train/rows"]  # odd-answer families are uniform
    # lr 0.01: every weight moves by ~1e-2 a step; 1e-4 allows Adam's amplification of float noise
    # in near-zero gradient entries (rows of several prompts share micro-batches differently when
    # some are skipped), and no other update
    for (_, pa), (_, pb) in zip(a.model.named_parameters(), b.model.named_parameters()):
        torch.testing.assert_close(pa, pb, atol=1e-4, rtol=1e-5)


def test_update_uses_the_training_attention_and_rollouts_keep_the_models_own(tmp_path):
    t = _trainer(tmp_path, "attn_implementation=eager", "skip_zero_adv=false")
    model = t.acc.unwrap_model(t.model)
    own = model.config._attn_implementation
    assert own != "eager"  # the tiny model loads with SDPA
    seen = {}
    update, generate = t.update, t.engine.generate

    def spy_update(samples):
        seen["update"] = model.config._attn_implementation
        return update(samples)

    def spy_generate(*a, **k):
        seen["generate"] = model.config._attn_implementation
        return generate(*a, **k)

    t.update, t.engine.generate = spy_update, spy_generate
    t.train_step(0)
    assert seen == {"update": "eager", "generate": own}
    assert model.config._attn_implementation == own  # restored after the update


@pytest.mark.parametrize("checkpointing", [False, True])
def test_auto_attention_on_cpu_runs_the_shared_prefix_block_by_block(tmp_path, checkpointing):
    # attn_implementation: auto on CPU trains with tagrpo_eager, and the shared prefix is then
    # the packed forward (with or without gradient checkpointing) computed block by block: no
    # KV cache, no dense L x L mask
    from transformers import AttentionInterface

    from tagrpo.train import packed_prefix as PP

    t = _trainer(tmp_path, f"gradient_checkpointing={str(checkpointing).lower()}", "skip_zero_adv=false")
    assert t.train_attn == PP.BLOCKS_KERNEL and t.learner.packed_prefix
    seen = []

    def spy(module, query, key, value, attention_mask, *a, **kw):
        seen.append((PP.LAYOUT_KWARG in kw, tuple(attention_mask.shape) if attention_mask is not None else None))
        return PP.blocks_attention(module, query, key, value, attention_mask, *a, **kw)

    AttentionInterface.register(PP.BLOCKS_KERNEL, spy)
    try:
        m = t.train_step(0)
    finally:
        PP.register_kernel()
    packed = [shape for blocks, shape in seen if blocks]
    assert packed and all(len(shape) == 4 and shape[2] == 1 for shape in packed), seen[:4]  # (k, 1, 1, Pm): no L x L mask
    assert m["train/computed_tokens_fwd_bwd"] < m["train/tokens"]  # each prompt computed once a row


def test_unknown_attention_implementation_is_a_clear_config_error(tmp_path):
    from tagrpo.errors import TagrpoError

    with pytest.raises(TagrpoError, match="attn_implementation"):
        _trainer(tmp_path, "attn_implementation=no-such-kernel")
