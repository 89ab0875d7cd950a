"""Memory-lean MLP and RMSNorm (train/lean_layers.py, `lean_layers`): the same forward bit for bit,
autograd's gradients (float64 gradcheck; the whole model against transformers' layers), less
saved activation memory, and only on the layers it covers."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from tagrpo.models.tiny import make_tiny_model, make_tiny_tokenizer
from tagrpo.train.lean_layers import (
    RMSNormFn,
    SwiGLUMLP,
    patch_model,
    saved_tensor_bytes,
    unpatch_model,
)


def _model(kind: str, seed: int = 0):
    import transformers as tf

    tok = make_tiny_tokenizer()
    if kind == "llama":
        model, _ = make_tiny_model(tok, seed=seed)
    else:
        kw = {"vocab_size": len(tok), "hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256}
        cfg, cls = {"qwen3": (tf.Qwen3Config(**kw, head_dim=32), tf.Qwen3ForCausalLM),
                    "qwen2": (tf.Qwen2Config(**kw), tf.Qwen2ForCausalLM)}[kind]
        torch.manual_seed(seed)
        model = cls(cfg)
    with torch.no_grad():  # norms away from 1 so their weight gradients are exercised
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    return model.train()


def _forward_backward(model, ids, autocast: bool = False):
    model.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        logits = model(input_ids=ids).logits
    loss = F.cross_entropy(logits.float()[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
    loss.backward()
    return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("kind", ["llama", "qwen3", "qwen2"])
@pytest.mark.parametrize("autocast", [False, True])
def test_model_forward_identical_and_gradients_match(kind, autocast):
    model = _model(kind)
    ids = torch.randint(3, model.config.vocab_size, (3, 17), generator=torch.Generator().manual_seed(1))
    ref_logits, ref_grads = _forward_backward(model, ids, autocast)
    n = patch_model(model)
    assert n == {"mlp": 2, "norm": 5 + (4 if kind == "qwen3" else 0)}  # 2 per layer + final (+ q_norm, k_norm)
    logits, grads = _forward_backward(model, ids, autocast)
    assert torch.equal(logits, ref_logits)  # the forward runs the same ops
    assert grads.keys() == ref_grads.keys()
    tol = 3e-2 if autocast else 1e-5  # bf16 products: rounding of a different summation order
    for name, g in grads.items():
        scale = ref_grads[name].abs().max().clamp_min(1e-12)
        assert ((g - ref_grads[name]).abs().max() / scale).item() < tol, name
    unpatch_model(model)
    assert not any(getattr(m, "_tagrpo_lean", False) for m in model.modules())
    logits, grads = _forward_backward(model, ids, autocast)
    assert torch.equal(logits, ref_logits)


def test_functions_pass_gradcheck_in_float64():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 6, dtype=torch.float64, generator=g, requires_grad=True)
    wg, wu = (torch.randn(10, 6, dtype=torch.float64, generator=g, requires_grad=True) for _ in range(2))
    wd = torch.randn(6, 10, dtype=torch.float64, generator=g, requires_grad=True)
    assert torch.autograd.gradcheck(SwiGLUMLP.apply, (x, wg, wu, wd))
    w = (1 + 0.1 * torch.randn(6, dtype=torch.float64, generator=g)).requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: RMSNormFn.apply(a, b, 1e-6), (x, w))
    # 2-D inputs and frozen weights (LoRA: norms frozen) take the same path
    x2 = x.detach()[0].requires_grad_()
    assert torch.autograd.gradcheck(lambda a: RMSNormFn.apply(a, w.detach(), 1e-6), (x2,))
    assert torch.autograd.gradcheck(lambda a: SwiGLUMLP.apply(a, wg.detach(), wu.detach(), wd.detach()), (x2,))


def _saved_bytes(model, ids) -> int:
    return saved_tensor_bytes(lambda: model.model(input_ids=ids), exclude=model.parameters())


def test_saved_activations_shrink_by_what_backward_no_longer_keeps():
    model = _model("llama")
    cfg = model.config
    ids = torch.randint(3, cfg.vocab_size, (4, 32), generator=torch.Generator().manual_seed(2))
    before = _saved_bytes(model, ids)
    patch_model(model)
    after = _saved_bytes(model, ids)
    tokens, f, h, layers = ids.numel(), cfg.intermediate_size, cfg.hidden_size, cfg.num_hidden_layers
    # per token and layer: silu(gate) and the product (2f), each norm's normalized input (2h)
    expected = 4 * tokens * layers * (2 * f + 2 * h)
    assert before - after >= 0.95 * expected, (before, after, expected)


def test_only_covered_layers_are_patched():
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(_model("llama"), LoraConfig(r=4, target_modules=["gate_proj", "up_proj", "q_proj"]))
    assert patch_model(model) == {"mlp": 0, "norm": 5}  # LoRA-wrapped projections keep transformers' MLP
    assert patch_model(model) == {"mlp": 0, "norm": 5}  # idempotent

    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=50))
    assert patch_model(gpt2) == {"mlp": 0, "norm": 0}


def test_deep_copy_of_a_patched_model_runs_its_own_layers():
    model = _model("llama")
    patch_model(model)
    twin = copy.deepcopy(model)
    with torch.no_grad():
        for p in twin.parameters():
            p.mul_(1.5)
    ids = torch.randint(3, model.config.vocab_size, (1, 9))
    with torch.no_grad():
        a, b = model(input_ids=ids).logits, twin(input_ids=ids).logits
    assert not torch.allclose(a, b)
    for m in twin.modules():  # every patched forward is bound to its own (copied) module
        if getattr(m, "_tagrpo_lean", False):
            assert m.forward.__self__ is m


def test_trainer_policy_uses_lean_layers_unless_off(tmp_path):
    from tagrpo.train.config import load_config
    from tagrpo.train.model import load_models

    for on in (True, False):
        cfg = load_config(None, ["model=tiny", f"lean_layers={str(on).lower()}", f"output_dir={tmp_path}"])
        model, *_ = load_models(cfg, torch.device("cpu"))
        assert any(getattr(m, "_tagrpo_lean", False) for m in model.modules()) is on


def _enable_checkpointing(model):
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


@pytest.mark.parametrize("autocast", [False, True])
def test_selective_checkpointing_keeps_the_mlp_out_of_the_recompute_with_the_same_gradients(autocast, monkeypatch):
    """gradient_checkpointing_mode: selective (keep_mlp): under activation checkpointing each MLP
    runs once (full checkpointing runs it again in backward), and every gradient equals the one
    without checkpointing and with full checkpointing."""
    ids = torch.randint(3, 200, (3, 17), generator=torch.Generator().manual_seed(2))
    calls = {"n": 0}
    fwd = SwiGLUMLP.forward

    def counting(ctx, *args):
        calls["n"] += 1
        return fwd(ctx, *args)

    monkeypatch.setattr(SwiGLUMLP, "forward", staticmethod(counting))
    results = {}
    for mode in ("none", "full", "selective"):
        model = _model("llama", seed=3)
        patch_model(model, keep_mlp=mode == "selective")
        if mode != "none":
            _enable_checkpointing(model)
        calls["n"] = 0
        results[mode] = _forward_backward(model, ids, autocast)
        results[mode] += (calls["n"],)
    layers = model.config.num_hidden_layers
    assert results["none"][2] == layers
    assert results["full"][2] == 2 * layers  # the recompute runs every MLP again
    assert results["selective"][2] == layers  # not in selective mode
    for mode in ("full", "selective"):
        assert torch.equal(results[mode][0], results["none"][0])
        for name, g in results["none"][1].items():
            torch.testing.assert_close(results[mode][1][name], g, atol=1e-6, rtol=1e-5)


def test_kept_mlp_tensors_are_freed_by_its_backward():
    """keep_mlp holds x, gate and up on the graph node until the MLP's backward, not longer."""
    model = _model("llama", seed=4)
    patch_model(model, keep_mlp=True)
    ids = torch.randint(3, 200, (2, 9), generator=torch.Generator().manual_seed(3))
    logits = model(input_ids=ids).logits
    nodes, seen = [], set()
    stack = [logits.grad_fn]
    while stack:  # every SwiGLUMLP node of the graph
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        if type(fn).__name__ == "SwiGLUMLPBackward":
            nodes.append(fn)
        stack.extend(f for f, _ in fn.next_functions)
    assert len(nodes) == model.config.num_hidden_layers
    assert all(n.kept is not None for n in nodes)
    logits.float().sum().backward(retain_graph=False)
    assert all(n.kept is None for n in nodes)


def test_trainer_sets_selective_checkpointing_on_the_policy_mlps(tmp_path):
    from tagrpo.train.config import load_config
    from tagrpo.train.model import load_models

    for gc, mode, keep in ((True, "selective", True), (True, "full", False), (False, "selective", False)):
        cfg = load_config(None, ["model=tiny", f"gradient_checkpointing={str(gc).lower()}",
                                 f"gradient_checkpointing_mode={mode}", f"output_dir={tmp_path}"])
        model, *_ = load_models(cfg, torch.device("cpu"))
        mlps = [m for m in model.modules() if hasattr(m, "gate_proj")]
        assert mlps and all(getattr(m, "_tagrpo_keep", False) is keep for m in mlps)
