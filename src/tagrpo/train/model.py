"""Building what the update trains: the policy (full weights or LoRA), the frozen reference for
the KL, the optimizer and the LR schedule, all on one device.

CPU-only settings switch on by device type, never elsewhere: `attn_implementation: auto` is
eager attention for the update on a CPU (it trains faster than SDPA's flash backward there) and
the model's own choice (SDPA / flash) on a GPU.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

import torch

from tagrpo.errors import TagrpoError
from tagrpo.train.config import TrainConfig


def lr_lambda(schedule: str, warmup: int, total: int):
    """LR multiplier of update `step` (0-based): linear warm-up over `warmup` updates, then
    constant, linear or cosine decay to 0 at update `total`."""
    def f(step: int) -> float:
        if warmup and step < warmup:
            return (step + 1) / warmup
        if schedule == "constant":
            return 1.0
        progress = min(max((step - warmup) / max(1, total - warmup), 0.0), 1.0)
        if schedule == "linear":
            return 1.0 - progress
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return f


def cpu_has_bf16_units(cpuinfo: str) -> bool:
    """Whether a Linux `/proc/cpuinfo` text names native bf16 matmul instructions: x86 AMX
    (`amx_bf16`) or AVX-512 BF16 (`avx512_bf16`), Arm `bf16`. Without them oneDNN still runs
    bf16 (it reports bf16 support on any AVX-512 CPU) but converts in software: measured 59 vs
    290 GFLOP/s fp32 for a 2048^2 matmul on an AVX-512 Xeon without bf16 units, 0.3 vs 67 on an
    AVX2-only EPYC."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() in ("flags", "features"):
            words = set(value.split())
            if words & {"amx_bf16", "avx512_bf16", "bf16"}:
                return True
    return False


def bf16_is_fast(device: torch.device) -> bool:
    """True when bf16 matmuls are faster than fp32 on `device`: CUDA with bf16 support, or a CPU
    with bf16 units (cpu_has_bf16_units) whose bf16 kernels torch's oneDNN runs. Anything else
    (an AVX2 or plain AVX-512 CPU, a CPU whose flags cannot be read) computes in fp32."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        try:
            if not torch.ops.mkldnn._is_mkldnn_bf16_supported():
                return False
            return cpu_has_bf16_units(Path("/proc/cpuinfo").read_text(errors="replace"))
        except (AttributeError, RuntimeError, OSError):
            return False
    return False


def use_bf16(cfg: TrainConfig, device: torch.device) -> bool:
    """Whether `autocast` means bf16 on this device."""
    return cfg.autocast == "bf16" or (cfg.autocast == "auto" and bf16_is_fast(device))


def training_attention(cfg: TrainConfig, device: torch.device) -> str | None:
    """The attention kernel of the training forward (None: the model's own)."""
    from tagrpo.train.packed_prefix import BLOCKS_KERNEL, register_kernel

    if cfg.attn_implementation == "auto":  # on CPU: eager, with the packed shared prefix block by block
        return register_kernel() if device.type == "cpu" else None
    return register_kernel() if cfg.attn_implementation == BLOCKS_KERNEL else cfg.attn_implementation


def load_models(cfg: TrainConfig, device: torch.device, ckpt: Path | None = None):
    """(policy, tokenizer, reference or None, training attention) with the policy and the
    reference on `device`. The reference is the initial policy, also when resuming; under LoRA
    there is none (the base model with the adapter disabled is the reference)."""
    from tagrpo.models import load_policy, make_tiny_model

    model, tok = make_tiny_model(seed=cfg.seed) if cfg.model == "tiny" else load_policy(cfg.model)
    ref = None
    if cfg.beta > 0 and not cfg.lora:
        ref = copy.deepcopy(model).eval()
        for p in ref.parameters():
            p.requires_grad_(False)
        ref.to(device)
    if ckpt is not None and not cfg.lora:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(ckpt / "model", dtype=torch.float32)
    attn = training_attention(cfg, device)
    if attn:  # fail now, with the field's name, if this model cannot use it
        prev = model.config._attn_implementation
        try:
            model.set_attn_implementation(attn)
            if ref is not None:
                ref.set_attn_implementation(attn)  # the reference only runs in the update
        except (ValueError, ImportError) as e:
            raise TagrpoError(f"config field 'attn_implementation': {attn!r} cannot be used with this model: {e}") from None
        model.set_attn_implementation(prev)
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    if cfg.lora:
        from peft import LoraConfig, PeftModel, get_peft_model

        if ckpt is not None:
            model = PeftModel.from_pretrained(model, ckpt / "model", is_trainable=True)
        else:
            targets = "all-linear" if cfg.lora_target_modules == "all-linear" else [t.strip() for t in cfg.lora_target_modules.split(",")]
            model = get_peft_model(model, LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                                                     target_modules=targets, task_type="CAUSAL_LM"))
    model.config.use_cache = False
    if cfg.lean_layers:
        from tagrpo.train.lean_layers import patch_model

        patch_model(model, keep_mlp=cfg.gradient_checkpointing and cfg.gradient_checkpointing_mode == "selective")
    return model.to(device), tok, ref, attn


# updates x trainable parameters from which `bf16_adamw_kernel: auto` builds the fused kernel: the
# eager step costs ~5 ns a parameter more (0.82 vs 0.16 s for 134.5M), the build ~5-10 s on 2 cores
FUSED_ADAMW_MIN_WORK = 2e9


def bf16_adamw_compile(kernel: str, updates: int, n_params: int) -> bool | None:
    """AdamWBF16State's `compile` argument for `bf16_adamw_kernel`: fused -> True (an error if the
    kernel cannot be built), eager -> False, auto -> None (fused, falling back to eager with a
    warning) when the run is long enough to pay for the build, else False."""
    if kernel == "auto":
        return None if updates * n_params >= FUSED_ADAMW_MIN_WORK else False
    return kernel == "fused"


def make_optimizer(model, cfg: TrainConfig):
    """AdamW and its LR schedule, sized as steps x ppo_epochs x num_mini_batches updates. Fused
    AdamW (one kernel over all parameters, CPU and CUDA), or with `optimizer_state: bf16` the same
    update with bfloat16 moments (train/optim.py)."""
    params = [p for p in model.parameters() if p.requires_grad]
    kw = {"lr": cfg.lr, "betas": (cfg.adam_beta1, cfg.adam_beta2), "weight_decay": cfg.weight_decay}
    updates = cfg.steps * cfg.ppo_epochs * cfg.num_mini_batches
    if cfg.optimizer_state == "bf16":
        from tagrpo.train.optim import AdamWBF16State

        opt = AdamWBF16State(params, compile=bf16_adamw_compile(cfg.bf16_adamw_kernel, updates,
                                                                sum(p.numel() for p in params)), **kw)
    else:
        opt = torch.optim.AdamW(params, fused=True, **kw)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(cfg.schedule, round(cfg.warmup_ratio * updates), updates))
    return opt, sched
