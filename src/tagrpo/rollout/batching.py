"""Padding and KV-cache helpers shared by the rollout engine and the trainer's log-prob forwards.

One left-padding helper (prompts end at the same column, so every response starts at the same
column and positions ignore the padding), one right-padding helper (responses), and the few
calls that move a transformers KV cache between batch rows. Every tensor is made on the device
it is asked for, so the same code runs on a CPU or a GPU.
"""

from __future__ import annotations

import inspect

import torch

#: bf16 on a CPU: the widths of the engine's prefill and of the update's forwards (plain; shared
#: prefix: prompts and responses) are rounded up to a multiple of this (masked padding), and the
#: update's lm-head chunks have a multiple of this many rows. oneDNN, which runs torch's bf16 CPU matmuls, compiles and keeps a
#: kernel for every matrix shape it meets (~0.85 MB of heap each, for the process's life):
#: unrounded widths meet new shapes every step, and the heap grows with them (measured: ~50 MB
#: an update of the demo; benchmarks/memory/RESULTS.md, session 12)
CPU_BF16_WIDTH_MULTIPLE = 16


def width_multiple(device, bf16: bool) -> int:
    """CPU_BF16_WIDTH_MULTIPLE for bf16 products on a CPU, else 1: fp32 CPU matmuls go to MKL,
    which keeps nothing per shape, and on a GPU padding would only cost compute."""
    return CPU_BF16_WIDTH_MULTIPLE if bf16 and torch.device(device).type == "cpu" else 1


def round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def left_pad(seqs: list[list[int]], pad_id: int, device=None, width: int | None = None):
    """Token lists left-padded to `width` (default: the longest). Returns ids (b, W) long,
    attention mask (b, W) long, positions (b, W) long that count only real tokens."""
    width = max(len(s) for s in seqs) if width is None else width
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)  # (b, W)
    att = torch.zeros((len(seqs), width), dtype=torch.long)  # (b, W)
    for r, s in enumerate(seqs):
        if s:
            ids[r, width - len(s):] = torch.tensor(s, dtype=torch.long)
            att[r, width - len(s):] = 1
    pos = (att.cumsum(-1) - 1).clamp(min=0)  # (b, W) positions ignore left padding
    return ids.to(device), att.to(device), pos.to(device)


def right_pad(seqs: list[list[int]], pad_id: int, device=None, width: int | None = None):
    """Token lists right-padded to `width` (default: the longest, at least 1). Returns ids (b, T)
    long and mask (b, T) float32 (1 on real tokens)."""
    width = max(max((len(s) for s in seqs), default=0), 1) if width is None else width
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)  # (b, T)
    mask = torch.zeros((len(seqs), width), dtype=torch.float32)  # (b, T)
    for r, s in enumerate(seqs):
        if s:
            ids[r, : len(s)] = torch.tensor(s, dtype=torch.long)
            mask[r, : len(s)] = 1.0
    return ids.to(device), mask.to(device)


def unwrap_model(model):
    """The transformers model inside DDP / PEFT wrappers (modules are shared, not copied)."""
    while hasattr(model, "module") and not hasattr(model, "config"):  # DDP and similar wrappers
        model = model.module
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def cache_kwarg(model) -> str:
    """Name of a model's KV-cache argument: 'cache' in recent transformers, 'past_key_values' before."""
    base = unwrap_model(model)
    return "cache" if "cache" in inspect.signature(type(base).forward).parameters else "past_key_values"


def output_cache(out):
    """The KV cache a forward with use_cache=True returned (either attribute name)."""
    return getattr(out, "cache", None) or out.past_key_values


def select_rows(cache, index: torch.Tensor):
    """Keep (or repeat) batch rows of a KV cache in place: row i of the result is row index[i]."""
    cache.batch_select_indices(index)
    return cache


def model_device(model) -> torch.device:
    """The device of a model's first parameter (CPU for a model without parameters)."""
    p = next(iter(model.parameters()), None)
    return p.device if p is not None else torch.device("cpu")
