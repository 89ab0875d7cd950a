"""AdamW with its two moments stored in bfloat16: 4 bytes of optimizer state a parameter instead
of 8 (`optimizer_state: bf16`).

The model state of full fine-tuning is 16 bytes a parameter in float32 (weights, gradients, two
AdamW moments); for SmolLM2-135M that is 2.2 GB, most of the demo's memory. Storing the moments
in bfloat16 saves a quarter of it. Plain rounding to bfloat16 would stall the second moment: with
beta2 = 0.999 each step changes it by ~0.1%, below bfloat16's resolution (2^-8), so a
round-to-nearest store would often write back the old value. The moments are therefore rounded
stochastically (round up with probability equal to the discarded fraction), which keeps every
stored value an unbiased estimate of the float32 one (the approach of torchao's low-precision
optimizers). The arithmetic of a step is float32 and identical to torch.optim.AdamW's:

    m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
    p = p (1 - lr wd) - lr / (1 - b1^t) * m / (sqrt(v / (1 - b2^t)) + eps)

Work runs over slices of at most `chunk` elements in reused buffers, so the float32 temporaries
stay small (the embedding matrix alone is 28M parameters), and one random int32 an element gives
both moments their 16 noise bits. That eager path is ~15 passes over memory a parameter (~10x
torch's fused fp32 AdamW, `benchmarks/memory/optim_speed.py`). Where torch.compile can build a
kernel (a C++ compiler on CPU; Triton on CUDA, untested: no GPU yet) the whole update of a parameter runs instead as ONE
fused pass (`_fused_update`): its rounding noise comes from a counter-based hash of (step,
parameter, element index) computed inside the kernel rather than from a generator, so it needs no
random draws, no temporaries and no chunks, and a resumed run still rounds as the original. One
build, for every shape (dynamic shapes), costs a few seconds once per process (cached on disk
across processes by torch); `compile=False` keeps the eager path, and a failed build falls back to
it with a warning. The two paths do the same float32 arithmetic with different noise streams.
"""

from __future__ import annotations

import warnings

import torch

_M32 = 0xFFFFFFFF


def _round_into(dst: torch.Tensor, x: torch.Tensor, noise: torch.Tensor) -> None:
    """dst (bfloat16) <- x (float32) rounded stochastically with `noise`, int32 in [0, 2^16)
    (overwritten): adding it to x's bits carries into the kept 16 bits with probability equal to
    the discarded fraction, away from zero for either sign (sign-magnitude), so E[dst] == x."""
    noise.add_(x.view(torch.int32)).bitwise_and_(-65536)
    dst.copy_(noise.view(torch.float32))  # exact: the low 16 bits are 0


def to_bf16_stochastic(x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """float32 -> bfloat16, rounding up with probability equal to the discarded fraction of the
    mantissa (so E[result] == x for finite x)."""
    x = x.contiguous()
    noise = torch.randint(0, 1 << 16, x.shape, dtype=torch.int32, device=x.device, generator=generator)
    out = torch.empty(x.shape, dtype=torch.bfloat16, device=x.device)
    _round_into(out, x, noise)
    return out


def _hash32(x):
    """int64 tensor (or Python int) in [0, 2^32) -> the same in [0, 2^32): a 32-bit integer mixer
    (xor-shift-multiply, the shape of Wellons' lowbias32; multipliers < 2^31 so no product leaves int64)."""
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & _M32
    x = x ^ (x >> 15)
    x = (x * 0x446CA68B) & _M32
    return x ^ (x >> 16)


def _round_bf16(x: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """`_round_into` as a pure function (for the fused kernel): noise int64 in [0, 2^16)."""
    bits = (x.view(torch.int32) + noise.to(torch.int32)) & -65536
    return bits.view(torch.float32).to(torch.bfloat16)


def _fused_update(p: torch.Tensor, g: torch.Tensor, m: torch.Tensor, v: torch.Tensor, seed: torch.Tensor,
                  hp: torch.Tensor) -> None:
    """One AdamW step of a flat parameter with bfloat16 moments, in place; written to be compiled
    into one pass. seed: int64 0-d in [0, 2^32); hp: float32 [1 - b1, b2, 1 - b2, 1 - lr wd,
    lr / (1 - b1^t), sqrt(1 - b2^t), eps]."""
    bits = _hash32(_hash32(torch.arange(p.numel(), device=p.device, dtype=torch.int64)) ^ seed)
    g = g.float()
    m32 = torch.lerp(m.float(), g, hp[0])
    v32 = v.float() * hp[1] + g * g * hp[2]
    m.copy_(_round_bf16(m32, bits & 0xFFFF))
    v.copy_(_round_bf16(v32, bits >> 16))
    p.mul_(hp[3]).sub_(hp[4] * m32 / (v32.sqrt() / hp[5] + hp[6]))


def _mix_seed(seed: int) -> int:
    """A Python int -> [0, 2^32), mixed so that neighbouring seeds give unrelated noise."""
    return _hash32(seed & _M32)


_COMPILED: dict = {}  # "fn" -> the compiled `_fused_update`, or None after a failed build


def _compiled_update():
    if "fn" not in _COMPILED:
        _COMPILED["fn"] = torch.compile(_fused_update, dynamic=True, fullgraph=True)
    return _COMPILED["fn"]


class AdamWBF16State(torch.optim.Optimizer):
    """torch.optim.AdamW's update with bfloat16 moments (see the module docstring)."""

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 1e-2,
                 chunk: int = 1 << 22, compile: bool | None = None):
        """compile: True = the fused kernel (an error when it cannot be built), False = the eager
        path, None = the fused kernel where it builds, else the eager path with a warning."""
        if lr < 0 or eps < 0 or weight_decay < 0 or not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError(f"invalid AdamW settings: lr={lr}, betas={betas}, eps={eps}, weight_decay={weight_decay}")
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay})
        self.chunk = chunk
        self.compile = compile

    def _fused(self, p, state, seed: int, hp: list[float]) -> bool:
        """The compiled one-pass update of `p`; False when it is off or could not be built."""
        if self.compile is False or _COMPILED.get("fn", True) is None:
            return False
        fn = _compiled_update()
        try:
            fn(p.view(-1), p.grad.reshape(-1), state["exp_avg"].view(-1), state["exp_avg_sq"].view(-1),
               torch.tensor(_mix_seed(seed), dtype=torch.int64, device=p.device),
               torch.tensor(hp, dtype=torch.float32, device=p.device))
        except Exception as e:  # no compiler, an unsupported backend: keep training on the eager path
            if self.compile:
                raise
            _COMPILED["fn"] = None
            warnings.warn(f"optimizer_state: bf16: the fused AdamW kernel could not be built "
                          f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); using the eager path "
                          "(same arithmetic, ~5x slower optimizer step)", RuntimeWarning, stacklevel=3)
            return False
        return True

    def load_state_dict(self, state_dict) -> None:
        """torch casts loaded state to the parameters' dtype; the moments stay bfloat16."""
        super().load_state_dict(state_dict)
        for state in self.state.values():
            for key in ("exp_avg", "exp_avg_sq"):
                if key in state:
                    state[key] = state[key].to(torch.bfloat16)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        scratch: dict = {}  # (size, device) -> float32 m, v, denominator and int32 noise, tmp of one chunk
        for group in self.param_groups:
            lr, (b1, b2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            for j, p in enumerate(group["params"]):
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = torch.tensor(0.0)
                    state["exp_avg"] = torch.zeros_like(p, dtype=torch.bfloat16, memory_format=torch.contiguous_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, dtype=torch.bfloat16, memory_format=torch.contiguous_format)
                state["step"] += 1
                t = float(state["step"])
                bc1, bc2_sqrt = 1 - b1 ** t, (1 - b2 ** t) ** 0.5
                # rounding noise seeded by (step, parameter): a resumed run rounds as the original
                seed = int(t) * 1_000_003 + j
                if self._fused(p, state, seed, [1 - b1, b2, 1 - b2, 1 - lr * wd, lr / bc1, bc2_sqrt, eps]):
                    continue
                gen = torch.Generator(p.device).manual_seed(seed)
                flat_p, flat_g = p.view(-1), p.grad.reshape(-1)
                flat_m, flat_v = state["exp_avg"].view(-1), state["exp_avg_sq"].view(-1)
                n_all = flat_p.numel()
                # chunks of reused buffers (4M elements was fastest here: 64K-1M, cache-sized, were not);
                # one random int32 an element gives both moments' 16 noise bits
                for s in range(0, n_all, self.chunk):
                    e = min(s + self.chunk, n_all)
                    key = (e - s, p.device)
                    if key not in scratch:
                        f32 = [torch.empty(e - s, device=p.device) for _ in range(3)]
                        i32 = [torch.empty(e - s, dtype=torch.int32, device=p.device) for _ in range(2)]
                        scratch[key] = (*f32, *i32)
                    m, v, denom, rnd, noise = scratch[key]
                    g = flat_g[s:e].float()
                    m.copy_(flat_m[s:e]).lerp_(g, 1 - b1)  # b1 m + (1 - b1) g
                    v.copy_(flat_v[s:e]).mul_(b2).addcmul_(g, g, value=1 - b2)
                    rnd.random_(generator=gen)  # 31 random bits
                    _round_into(flat_m[s:e], m, torch.bitwise_and(rnd, 0xFFFF, out=noise))  # bits 0-15
                    _round_into(flat_v[s:e], v, rnd.bitwise_right_shift_(15).bitwise_and_(0xFFFF))  # bits 15-30
                    pp = flat_p[s:e]
                    if wd:
                        pp.mul_(1 - lr * wd)
                    torch.sqrt(v, out=denom).div_(bc2_sqrt).add_(eps)
                    pp.addcdiv_(m, denom, value=-lr / bc1)
        return loss
