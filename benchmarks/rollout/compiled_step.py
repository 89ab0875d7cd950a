"""Does torch.compile pay for the bf16 decode step? (issue 15: "a decode step compiled with
torch.compile"; measured, not kept.)

Each layer of `FastDecoder.step` (rollout/decode.py) is written as one function and compiled by
inductor (`dynamic=False`, fullgraph): it fuses the norms, the rotation, the cache write, the
softmax, silu * up and the residual adds into a few C++ loops. The products stay on the weights
packed for oneDNN (rollout/packing.py): an mkldnn-layout tensor cannot enter a compiled graph, so
each product is an opaque custom op that looks its packed weight up by a slot number passed as a
tensor (one graph serves all 30 layers). Both decoders decode the same prefill of the speed
benchmark's prompts (4 questions x 4 samples = 16 rows), greedy, `--steps` steps, interleaved
`--reps` times; prints the compile time, ms a step each, and whether the greedy tokens agree
(the fused kernels round bf16 intermediates differently, so logits differ by a few bf16 ulps).

    .venv/bin/python benchmarks/rollout/compiled_step.py --reps 7 --out FILE.json

Needs a C++ compiler (inductor) and a CPU with bf16 units. Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import workload  # benchmarks/rollout/bench.py
from machine import commit, cpu_name  # benchmarks/machine.py

from tagrpo.rollout import decode as D
from tagrpo.rollout.packing import pack_linears

SLOTS: list = []  # Packed weights, looked up by slot number inside the compiled graph


@torch.library.custom_op("tagrpo_bench::packed_linear", mutates_args=())
def packed_linear(x: torch.Tensor, slot: torch.Tensor, out: int) -> torch.Tensor:
    return SLOTS[int(slot)](x)


@packed_linear.register_fake
def _(x, slot, out):
    return x.new_empty((x.shape[0], out))


def layer_step(x, cos, sin, mask, keys, values, t, n1, n2, s_qkv, s_o, s_gu, s_down, shape: tuple):
    """One decoder layer of FastDecoder.step (Llama, q|k|v and gate|up packed), x (b, h)."""
    heads, kv_heads, d, inter, eps = shape
    b, nq, nk = x.shape[0], heads * d, kv_heads * d

    def rms(y, w):
        h = y.float()
        return w * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(y.dtype)

    qkv = packed_linear(rms(x, n1), s_qkv, nq + 2 * nk)
    qk = D._rope(qkv[:, : nq + nk].reshape(b, heads + kv_heads, 1, d), cos, sin)
    keys.index_copy_(2, t, qk[:, heads:])
    values.index_copy_(2, t, qkv[:, nq + nk :].reshape(b, kv_heads, 1, d))
    qg = qk[:, :heads].reshape(b, kv_heads, heads // kv_heads, d)
    scores = torch.matmul(qg, keys.transpose(2, 3)) * d**-0.5 + mask
    probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(qg.dtype)
    x = x + packed_linear(torch.matmul(probs, values).reshape(b, nq), s_o, x.shape[1])
    gu = packed_linear(rms(x, n2), s_gu, 2 * inter)
    return x + packed_linear(F.silu(gu[:, :inter]) * gu[:, inter:], s_down, x.shape[1])


class CompiledDecoder(D.FastDecoder):
    """FastDecoder whose layers run `layer_step` compiled (Llama without biases or q/k norms)."""

    def __init__(self, model, packed):
        super().__init__(model, packed=packed)
        SLOTS.clear()
        self.args = []
        for layer in self.layers:
            a, m = layer.self_attn, layer.mlp
            slots = []
            for key in (a, a.o_proj, m, m.down_proj):
                SLOTS.append(packed[id(key)])
                slots.append(torch.tensor(len(SLOTS) - 1))
            self.args.append((layer.input_layernorm.weight, layer.post_attention_layernorm.weight, *slots))
        cfg = model.config
        self.shape = (self.heads, self.kv_heads, self.head_dim, cfg.intermediate_size, cfg.rms_norm_eps)
        self.fn = torch.compile(layer_step, dynamic=False, fullgraph=True)

    @torch.no_grad()
    def step(self, tokens, positions):
        if self.length == self.keys[0].shape[2]:
            self._grow()
        t, inner = self.length, self.model.model
        x = inner.embed_tokens(tokens)  # (b, h)
        cos, sin = inner.rotary_emb(x, position_ids=positions[:, None])
        cos, sin = cos[:, None], D._signed_sin(sin[:, None])
        self.mask[..., t] = 0.0
        at = torch.tensor([t])
        for i, args in enumerate(self.args):
            x = self.fn(x, cos, sin, self.mask, self.keys[i], self.values[i], at, *args, shape=self.shape)
        self.length = t + 1
        return self._linear(D._rms(x, inner.norm), self.model.lm_head)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=48)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    torch.set_num_threads(2)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tagrpo.models import embedded_model_dir
    from tagrpo.rollout.batching import left_pad, output_cache

    path = embedded_model_dir()
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    for p in model.parameters():
        p.requires_grad_(False)
        p.data = p.data.to(torch.bfloat16)
    prompts = workload(tok, 4, 4)
    ids, att, pos = left_pad(prompts, tok.pad_token_id)  # (b, L) each
    with torch.no_grad():
        cache = output_cache(model(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=True))
    packed = pack_linears(model, rows=16)

    def decode(dec, steps):
        dec.load(copy.deepcopy(cache), att)
        tokens, p = torch.full((len(prompts),), 28, dtype=torch.long), pos[:, -1] + 1  # (b,) each
        out, t = [], time.perf_counter()
        for _ in range(steps):
            logits = dec.step(tokens, p)  # (b, V)
            p, tokens = p + 1, logits.argmax(-1)
            out.append(tokens)
        return (time.perf_counter() - t) / steps * 1e3, torch.stack(out)

    compiled = CompiledDecoder(model, packed)
    t = time.perf_counter()
    decode(compiled, 2)
    compile_s = time.perf_counter() - t
    ms: dict[str, list] = {"eager": [], "compiled": []}
    agree = []
    for _ in range(a.reps):
        m_e, tok_e = decode(D.FastDecoder(model, packed=packed), a.steps)
        m_c, tok_c = decode(compiled, a.steps)
        ms["eager"].append(m_e)
        ms["compiled"].append(m_c)
        agree.append((tok_e == tok_c).float().mean().item())
    med = {k: statistics.median(v) for k, v in ms.items()}
    doc = {"cpu": cpu_name(), "commit": commit(), "command": " ".join(sys.argv), "torch": torch.__version__,
           "when": time.strftime("%Y-%m-%d %H:%M"), "rows": len(prompts), "first_call_s (compile)": compile_s,
           "ms_per_step": ms, "median": med, "speedup": med["eager"] / med["compiled"], "greedy_tokens_agree": agree}
    print(f"{len(prompts)} rows: compile {compile_s:.1f} s; ms a step eager {med['eager']:.1f} "
          f"({[round(x, 1) for x in ms['eager']]}), compiled {med['compiled']:.1f} ({[round(x, 1) for x in ms['compiled']]}): "
          f"{med['eager'] / med['compiled']:.2f}x; greedy tokens agree {[round(x, 3) for x in agree]}", flush=True)
    if a.out:
        a.out.write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
