"""bf16 weights packed for oneDNN, for the fast decoder's products (rollout/decode.py).

bf16 on CPUs with bf16 units: oneDNN repacks a plain bf16 weight at every product, which at a
decode step's 16-32 rows costs more than the product (SmolLM2-135M, 16 rows: 32 ms of products a
step, 22 ms with the weights packed once). `pack_linears(model)` packs every weight the step
uses into oneDNN's layout (`torch.ops.mkldnn._reorder_linear_weight`, what inductor's CPU
freezing does; ~0.1 s for the model), and the step runs `_linear_pointwise` on them: the same
numbers as `F.linear` on the bf16 weights, bit for bit (tested); sampled tokens/s 1.17-1.21x
the unpacked step's (benchmarks/rollout/RESULTS.md, session 6). Each layer's q, k, v projections
are packed side by side as one product, gate and up as another (fewer, larger products). The
engine packs once per `generate` call (the weights change between calls) and frees the packed
copy at its end.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def can_pack(model) -> bool:
    """Whether `pack_linears` applies: bf16 weights on a CPU whose oneDNN has bf16 kernels."""
    try:
        p = next(model.parameters())
        return (p.dtype == torch.bfloat16 and p.device.type == "cpu" and torch.backends.mkldnn.is_available()
                and torch.ops.mkldnn._is_mkldnn_bf16_supported() and hasattr(torch.ops.mkldnn, "_linear_pointwise"))
    except (AttributeError, RuntimeError, StopIteration):
        return False


@dataclass(frozen=True)
class Packed:
    """A weight in oneDNN's layout: one nn.Linear's, or several side by side (their outputs
    concatenated, in `modules` order), with the matching bias (None: no bias)."""

    weight: torch.Tensor
    bias: torch.Tensor | None
    modules: tuple

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """x (b, in) -> (b, sum of the modules' outputs), the product on the packed weight."""
        return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "none", [], "")


def packed_modules(packed: dict) -> list:
    """Every nn.Linear whose weight has a packed form in `packed` (pack_linears)."""
    return [m for p in packed.values() for m in p.modules]


_FUSED = {"self_attn": ("q_proj", "k_proj", "v_proj"), "mlp": ("gate_proj", "up_proj")}


@torch.no_grad()
def pack_linears(model, rows: int = 16, release=None) -> dict:
    """id(module) -> Packed (a hint of `rows` rows; any row count runs) for every projection of
    the decode step and the lm_head; {} where `can_pack` is False. Each layer's q, k and v
    projections are packed as one product keyed by its attention module, gate and up as one
    keyed by its MLP (SmolLM2-135M, 16 rows: 30 layers of these products 11.1 -> 9.1 ms, the same
    numbers here: oneDNN computes each output from the same row and column either way); o, down
    and the lm_head alone, keyed by themselves. `release(module)`, when given, is called on each
    nn.Linear right after its weight is packed (the engine's lean mode frees the bf16 weight
    there, so the two forms never all exist at once)."""
    if not can_pack(model):
        return {}
    groups: list = []  # (key module, its linears)
    for layer in model.model.layers:
        for parent, names in _FUSED.items():
            mod = getattr(layer, parent)
            parts = tuple(getattr(mod, n) for n in names)
            if len({p.bias is None for p in parts}) == 1:  # all with a bias or all without
                groups.append((mod, parts))
            else:
                groups += [(p, (p,)) for p in parts]
        groups += [(layer.self_attn.o_proj, (layer.self_attn.o_proj,)), (layer.mlp.down_proj, (layer.mlp.down_proj,))]
    groups.append((model.lm_head, (model.lm_head,)))
    packed = {}
    # the fused weights are put side by side in one buffer reused for every group (no per-layer
    # temporaries left as holes in a heap that keeps freed memory)
    size = max((sum(p.weight.numel() for p in parts) for _, parts in groups if len(parts) > 1), default=0)
    buf = model.lm_head.weight.new_empty(size)
    for key, parts in groups:
        if len(parts) == 1:
            weight = parts[0].weight
        else:
            shape = (sum(p.out_features for p in parts), parts[0].in_features)
            weight = torch.cat([p.weight for p in parts], out=buf[: shape[0] * shape[1]].view(shape))
        bias = parts[0].bias if len(parts) == 1 or parts[0].bias is None else torch.cat([p.bias for p in parts])
        packed[id(key)] = Packed(torch.ops.mkldnn._reorder_linear_weight(weight, rows), bias, parts)
        if release is not None:
            for p in parts:
                release(p)
    return packed
