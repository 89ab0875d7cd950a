"""Does one compiled graph for the whole bf16 decode step pay? (issue 15; measured, not kept.)

Session 14 (`compiled_step.py`) compiled each layer with its products as opaque custom ops on the
oneDNN-packed weights and lost the fusion's gain to ~34 us of Python dispatch a product. Here the
30 layers are ONE inductor graph (fullgraph, static shapes) whose products are plain `F.linear`
on bf16 weights passed as graph inputs (q|k|v and gate|up concatenated), so no Python runs
between kernels; optionally inductor's C++ wrapper (`cppwrap`: no Python between kernel calls at
all) or its max-autotune GEMM templates (`autotune`). The final norm and lm_head stay eager. Same
workload and greedy check as compiled_step.py (16 rows, 40 steps), interleaved with the eager
`FastDecoder` on packed weights.

    .venv/bin/python benchmarks/rollout/whole_step.py default|cppwrap|autotune   (REPS=3 in the environment)

Needs a C++ compiler (inductor). Run it on a quiet machine.
"""
import copy, statistics, sys, time, os
from pathlib import Path
import torch, torch.nn.functional as F
sys.path.insert(0, str(Path(__file__).resolve().parents[1])); sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import workload
from tagrpo.rollout import decode as D
from tagrpo.rollout.packing import pack_linears
import torch._inductor.config as IC

MODE = sys.argv[1] if len(sys.argv) > 1 else "default"
if "cppwrap" in MODE:
    IC.cpp_wrapper = True
if "autotune" in MODE:
    IC.max_autotune = True; IC.max_autotune_gemm_backends = "CPP,ATEN"

def whole(x, cos, sin, mask, keys, values, t, W, shape):
    heads, kv_heads, d, inter, eps = shape
    b, nq, nk = x.shape[0], heads * d, kv_heads * d
    def rms(y, w):
        h = y.float()
        return w * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(y.dtype)
    for i in range(len(keys)):
        n1, n2, wqkv, wo, wgu, wd = W[i]
        qkv = F.linear(rms(x, n1), wqkv)
        qk = D._rope(qkv[:, : nq + nk].reshape(b, heads + kv_heads, 1, d), cos, sin)
        keys[i].index_copy_(2, t, qk[:, heads:])
        values[i].index_copy_(2, t, qkv[:, nq + nk :].reshape(b, kv_heads, 1, d))
        qg = qk[:, :heads].reshape(b, kv_heads, heads // kv_heads, d)
        scores = torch.matmul(qg, keys[i].transpose(2, 3)) * d**-0.5 + mask
        probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(qg.dtype)
        x = x + F.linear(torch.matmul(probs, values[i]).reshape(b, nq), wo)
        gu = F.linear(rms(x, n2), wgu)
        x = x + F.linear(F.silu(gu[:, :inter]) * gu[:, inter:], wd)
    return x

class Whole(D.FastDecoder):
    def __init__(self, model):
        super().__init__(model)
        self.W = []
        for L in self.layers:
            a, m = L.self_attn, L.mlp
            self.W.append((L.input_layernorm.weight, L.post_attention_layernorm.weight,
                           torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]), a.o_proj.weight,
                           torch.cat([m.gate_proj.weight, m.up_proj.weight]), m.down_proj.weight))
        cfg = model.config
        self.shape = (self.heads, self.kv_heads, self.head_dim, cfg.intermediate_size, cfg.rms_norm_eps)
        self.fn = torch.compile(whole, dynamic=False, fullgraph=True)
    @torch.no_grad()
    def step(self, tokens, positions):
        if self.length == self.keys[0].shape[2]:
            self._grow()
        t, inner = self.length, self.model.model
        x = inner.embed_tokens(tokens)
        cos, sin = inner.rotary_emb(x, position_ids=positions[:, None])
        cos, sin = cos[:, None], D._signed_sin(sin[:, None])
        self.mask[..., t] = 0.0
        x = self.fn(x, cos, sin, self.mask, self.keys, self.values, torch.tensor([t]), self.W, self.shape)
        self.length = t + 1
        return D._linear(D._rms(x, inner.norm), self.model.lm_head)

def main():
    torch.set_num_threads(2)
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from tagrpo.models import embedded_model_dir
    from tagrpo.rollout.batching import left_pad, output_cache
    path = embedded_model_dir()
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    for p in model.parameters():
        p.requires_grad_(False); p.data = p.data.to(torch.bfloat16)
    prompts = workload(tok, 4, 4)
    ids, att, pos = left_pad(prompts, tok.pad_token_id)
    with torch.no_grad():
        cache = output_cache(model(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=True))
    packed = pack_linears(model, rows=16)
    steps = 40
    def decode(dec):
        dec.load(copy.deepcopy(cache), att)
        tokens, p = torch.full((len(prompts),), 28, dtype=torch.long), pos[:, -1] + 1
        out, t = [], time.perf_counter()
        for _ in range(steps):
            logits = dec.step(tokens, p); p, tokens = p + 1, logits.argmax(-1); out.append(tokens)
        return (time.perf_counter() - t) / steps * 1e3, torch.stack(out)
    w = Whole(model)
    t0 = time.perf_counter(); decode(w); print(f"[{MODE}] first decode (compiles) {time.perf_counter()-t0:.1f} s", flush=True)
    me, mc, ag = [], [], []
    for _ in range(int(os.environ.get("REPS", "4"))):
        a, ta = decode(D.FastDecoder(model, packed=packed)); b, tb = decode(w)
        me.append(a); mc.append(b); ag.append((ta == tb).float().mean().item())
    print(f"[{MODE}] eager packed {statistics.median(me):.1f} ms {[round(x,1) for x in me]}; whole-step compiled "
          f"{statistics.median(mc):.1f} ms {[round(x,1) for x in mc]}; {statistics.median(me)/statistics.median(mc):.2f}x; agree {[round(x,3) for x in ag]}", flush=True)
main()
