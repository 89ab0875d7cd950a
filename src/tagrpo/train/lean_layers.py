"""Memory-lean SwiGLU MLP and RMSNorm for the update (`lean_layers`), in plain PyTorch.

Autograd keeps every intermediate of transformers' modules for backward. Per token and layer of a
Llama-family decoder (hidden h, MLP width f), the MLP `down(silu(gate(x)) * up(x))` keeps x, gate,
silu(gate), up and their product (h + 4f floats), and each RMSNorm keeps its input, its
normalized input and its output (3h). For SmolLM2-135M (h 576, f 1536) that is more than half of
the update's activation memory. The two autograd functions here compute the same forward, op for
op (so the loss and the log-probs are bit-identical), but keep only what backward needs and
recompute the rest there, as Liger-Kernel's SwiGLU and RMSNorm do on GPUs:

- `SwiGLUMLP`: keeps x, gate and up; silu(gate) * up is recomputed in backward (one element-wise
  pass), for down's weight gradient and for the gate/up gradients (h + 2f floats, 2f less);
- `RMSNormFn`: keeps the input and the per-token inverse RMS; the normalized input is recomputed
  (h less per norm; its output is kept by the next linear layer anyway).

Gradients equal autograd's up to float rounding (tests: every parameter's gradient, fp32 and bf16
autocast, 2-D and 3-D inputs). Under autocast the products run in the autocast dtype in forward
and in backward (as autocast's own linear backward does), the weight gradients come back in the
weights' dtype.

Selective activation checkpointing (`gradient_checkpointing_mode: selective`, `patch_model(...,
keep_mlp=True)`): the MLP keeps x (in the products' dtype), gate and up on its own graph node
instead of through save_for_backward, which activation checkpointing replaces by a recompute. Its
backward then needs no recompute, and the layer's recompute stops at the norm before the MLP
(torch's early stop): the MLP's three products, 3/4 of a SmolLM2 layer's weight FLOPs, run once
(tests: gradients equal to full checkpointing and to none; the MLP forward counted). torch's own
selective checkpointing (`create_selective_checkpoint_contexts`, a dispatch mode over every op)
was measured slower here: benchmarks/memory/RESULTS.md, session 20.

`patch_model(model)` swaps the forward of every covered module instance (Llama, Mistral, Qwen2,
Qwen3 MLP and RMSNorm classes, plain bias-free linears, SiLU); anything else (LoRA-wrapped
projections, other norms such as Gemma's 1 + w) keeps transformers' forward.
"""

from __future__ import annotations

import types

import torch
import torch.nn.functional as F

MLP_CLASSES = ("LlamaMLP", "MistralMLP", "Qwen2MLP", "Qwen3MLP")
NORM_CLASSES = ("LlamaRMSNorm", "MistralRMSNorm", "Qwen2RMSNorm", "Qwen3RMSNorm")


def _mm_dtype(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return t if t.dtype == dtype else t.to(dtype)


class SwiGLUMLP(torch.autograd.Function):
    """down(silu(x @ Wg^T) * (x @ Wu^T)) keeping x, gate and up for backward."""

    @staticmethod
    def forward(ctx, x, w_gate, w_up, w_down, keep=False):
        gate = F.linear(x, w_gate)
        up = F.linear(x, w_up)
        out = F.linear(F.silu(gate) * up, w_down)
        if keep:  # held by the graph node itself, out of reach of activation checkpointing's hooks
            ctx.kept = (_mm_dtype(x, gate.dtype), gate, up, w_gate, w_up, w_down)
            ctx.x_dtype = x.dtype  # the gradient goes back in the input's dtype
        else:
            ctx.kept = None
            ctx.save_for_backward(x, gate, up, w_gate, w_up, w_down)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        if ctx.kept is not None:
            x, gate, up, w_gate, w_up, w_down = ctx.kept
            ctx.kept = None  # freed with this backward, not with the graph
            x_dtype = ctx.x_dtype
        else:
            x, gate, up, w_gate, w_up, w_down = ctx.saved_tensors
            x_dtype = x.dtype
        dt = gate.dtype  # the products' dtype in forward (the autocast dtype under autocast)
        g2 = _mm_dtype(grad_out, dt).reshape(-1, grad_out.shape[-1])  # (n, h)
        act = F.silu(gate)
        grad_wd = None
        if ctx.needs_input_grad[3]:
            prod = (act * up).reshape(-1, up.shape[-1])  # (n, f), recomputed
            grad_wd = g2.t().mm(prod).to(w_down.dtype)  # (h, f)
        grad_prod = g2.mm(_mm_dtype(w_down, dt)).reshape(up.shape)  # (..., f)
        grad_up = grad_prod * act
        grad_gate = torch.ops.aten.silu_backward(grad_prod * up, gate)  # autograd's own silu kernel
        gg, gu = grad_gate.reshape(-1, gate.shape[-1]), grad_up.reshape(-1, up.shape[-1])
        grad_x = grad_wg = grad_wu = None
        if ctx.needs_input_grad[0]:
            grad_x = (gg.mm(_mm_dtype(w_gate, dt)) + gu.mm(_mm_dtype(w_up, dt))).reshape(x.shape).to(x_dtype)
        x2 = _mm_dtype(x, dt).reshape(-1, x.shape[-1])
        if ctx.needs_input_grad[1]:
            grad_wg = gg.t().mm(x2).to(w_gate.dtype)
        if ctx.needs_input_grad[2]:
            grad_wu = gu.t().mm(x2).to(w_up.dtype)
        return grad_x, grad_wg, grad_wu, grad_wd, None


def _norm_dtype(x: torch.Tensor) -> torch.dtype:
    """float32 as transformers' RMSNorm (float64 stays float64: gradcheck)."""
    return torch.promote_types(x.dtype, torch.float32)


class RMSNormFn(torch.autograd.Function):
    """transformers' RMSNorm, weight * (x * rsqrt(mean(x^2) + eps)) in float32, keeping the input
    and the inverse RMS for backward."""

    @staticmethod
    def forward(ctx, x, weight, eps: float):
        h = x.to(_norm_dtype(x))
        rstd = torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
        out = weight * (h * rstd).to(x.dtype)
        ctx.save_for_backward(x, weight, rstd)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        x, weight, rstd = ctx.saved_tensors
        xhat = x.to(rstd.dtype) * rstd
        grad_w = None
        if ctx.needs_input_grad[1]:
            prod = grad_out * xhat.to(x.dtype)
            grad_w = prod.reshape(-1, prod.shape[-1]).sum(0).to(weight.dtype)
        grad_x = None
        if ctx.needs_input_grad[0]:
            gx = (grad_out * weight).to(rstd.dtype)
            grad_x = (rstd * (gx - xhat * (gx * xhat).mean(-1, keepdim=True))).to(x.dtype)
        return grad_x, grad_w, None


def _mlp_forward(mlp, x):
    return SwiGLUMLP.apply(x, mlp.gate_proj.weight, mlp.up_proj.weight, mlp.down_proj.weight,
                           getattr(mlp, "_tagrpo_keep", False))


def _norm_forward(norm, x):
    return RMSNormFn.apply(x, norm.weight, norm.variance_epsilon)


def mlp_covered(module) -> bool:
    if type(module).__name__ not in MLP_CLASSES:
        return False
    parts = [getattr(module, n, None) for n in ("gate_proj", "up_proj", "down_proj")]
    if any(type(p) is not torch.nn.Linear or p.bias is not None for p in parts):
        return False
    return isinstance(getattr(module, "act_fn", None), torch.nn.SiLU) or type(getattr(module, "act_fn", None)).__name__ == "SiLUActivation"


def norm_covered(module) -> bool:
    return (type(module).__name__ in NORM_CLASSES and isinstance(getattr(module, "weight", None), torch.nn.Parameter)
            and hasattr(module, "variance_epsilon"))


def patch_model(model, keep_mlp: bool = False) -> dict[str, int]:
    """Swap in the lean forwards on every covered module of `model` (idempotent; bound methods, so a
    deep copy of the model calls its own modules); returns how many MLPs and norms are patched.
    `keep_mlp` (gradient_checkpointing_mode: selective): each MLP keeps what its backward needs
    on its graph node rather than through save_for_backward, so activation checkpointing neither
    frees nor recomputes it: a checkpointed layer's recompute stops after its last norm (torch's
    early stop), before the MLP."""
    n = {"mlp": 0, "norm": 0}
    for module in model.modules():
        if getattr(module, "_tagrpo_lean", False):
            n["mlp" if mlp_covered(module) else "norm"] += 1
            if mlp_covered(module):
                module._tagrpo_keep = keep_mlp
        elif mlp_covered(module):
            module.forward, module._tagrpo_lean = types.MethodType(_mlp_forward, module), True
            module._tagrpo_keep = keep_mlp
            n["mlp"] += 1
        elif norm_covered(module):
            module.forward, module._tagrpo_lean = types.MethodType(_norm_forward, module), True
            n["norm"] += 1
    return n


def unpatch_model(model) -> None:
    """Back to transformers' forwards."""
    for module in model.modules():
        if getattr(module, "_tagrpo_lean", False):
            del module.forward, module._tagrpo_lean
            module.__dict__.pop("_tagrpo_keep", None)


def saved_tensor_bytes(fn, exclude=()) -> int:
    """Bytes of the distinct storages autograd saves for backward while `fn()` runs (what a
    micro-batch's activations hold at the end of its forward), leaving out the storages of the
    tensors in `exclude` (the parameters). For tests and benchmarks/memory/lean_layers_bench.py."""
    skip = {t.untyped_storage().data_ptr() for t in exclude}
    seen: dict[int, int] = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in skip:
            seen[ptr] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(seen.values())
