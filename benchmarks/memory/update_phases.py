"""Where one training step of the speed benchmark's GRPO workload spends its time and memory:
wall-clock wrappers (no profiler) around the update, the chunked lm-head log-probs' forward and
backward, the lean SwiGLU MLP's forward and backward (under full gradient checkpointing the MLP
backward includes the layer recompute it triggers) and gradient clipping, plus the peak RSS of
each phase (sampled every 3 ms from /proc/self/statm). 2 warm-up steps, then 3 steps printed.
The session-20 numbers in benchmarks/memory/RESULTS.md (lm-head backward 0.84 -> 0.51 s, MLP
forward 1.2 -> 0.7 s, the peaks by phase, the lean-memory toggles) come from this script.

    .venv/bin/python benchmarks/memory/update_phases.py gradient_checkpointing=true,optimizer_state=bf16,bf16_adamw_kernel=fused
    EXP=notrim,nocopyrel,keepgrads,noleaneng .venv/bin/python benchmarks/memory/update_phases.py [KEY=VAL,...]

EXP turns lean-memory behaviours off by monkeypatching (for measurement only): notrim (no heap
trims), nocopyrel (the bf16 rollout copy kept), keepgrads (gradients kept across the rollout),
noleaneng (the engine keeps its packed projections after prefill), cache (the shared prefix
through the KV cache, as before a5990c3, instead of the packed forward that tagrpo_eager uses
without gradient checkpointing too).
CONFIG=configs/demo.yaml runs that config's job (5 steps) instead of the speed benchmark's. The attention function's
forward calls (forwards and checkpointing's recomputes; not its backward) are timed too, as
`attn` (session 21: the packed prefix under a dense mask, `attn_implementation=eager`, against
block by block, the default `tagrpo_eager`).
"""
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "speed_vs_trl"))
os.environ.setdefault("TAGRPO_BENCH_DTYPE", "bf16")
import bench
from transformers import AttentionInterface
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from tagrpo.train import packed_prefix as PP
from tagrpo.train.config import load_config
from tagrpo.train.trainer import Trainer
from tagrpo.train import update as U
extra = sys.argv[1].split(",") if len(sys.argv) > 1 and sys.argv[1] else []
sets = ["algorithm=grpo", "model=smollm2-135m-instruct", "neighbors=rules", "num_neighbors=3", "samples_per_variant=4",
        "questions_per_step=4", "max_new_tokens=64", "temperature=0.6", "top_p=1.0", "beta=0.0", "lr=1e-5",
        "schedule=constant", "warmup_ratio=0.0", "autocast=bf16", "micro_batch_tokens=16384", "generate_batch_size=64",
        "tensorboard=false", "save_final=false", "steps=5", f"output_dir={tempfile.mkdtemp()}", "agg=token-mean", "skip_zero_adv=false"] + extra
if os.environ.get("CONFIG"):  # another job: CONFIG=configs/demo.yaml (its own data), the same extra settings
    t = Trainer(load_config(os.environ["CONFIG"], ["steps=5", "save_every=0", "save_final=false", "tensorboard=false",
                                                   f"output_dir={tempfile.mkdtemp()}"] + extra))
else:
    t = Trainer(load_config(None, sets), rows=bench.rows())
t.setup()
exp = os.environ.get("EXP", "")
if "notrim" in exp:
    import tagrpo._malloc as MM
    t.learner.trim_heap = False
    MM.release_free_memory = lambda *a, **k: None
if "nocopyrel" in exp:
    t.engine.release_copy = lambda: None
if "keepgrads" in exp:
    t.learner.release_grads = lambda: None
if "noleaneng" in exp:
    t.engine.lean = False
if "cache" in exp:  # the KV-cache shared prefix (the packed forward's alternative without checkpointing)
    t.learner.packed_prefix = False
print("EXP", exp)
for s in range(2):
    m = t.train_step(s); print(s, m["time/step"], m["time/generate"], m["time/train"], flush=True)
import collections, threading
phase = ["setup"]; peaks = collections.defaultdict(int)
def sampler():
    ps = os.sysconf("SC_PAGE_SIZE")
    while True:
        with open("/proc/self/statm") as f: r = int(f.read().split()[1]) * ps
        if r > peaks[phase[0]]: peaks[phase[0]] = r
        time.sleep(0.003)
threading.Thread(target=sampler, daemon=True).start()
from tagrpo.train import logprobs as LP, lean_layers as LL
acc = collections.defaultdict(float)
def timed(cls, name, label):
    f = getattr(cls, name).__func__ if hasattr(getattr(cls, name), "__func__") else getattr(cls, name)
    def w(*a, **k):
        if label == "lmhead_fwd": phase[0] = "fwd-lmhead"
        if label == "lmhead_bwd": phase[0] = "bwd-lmhead"
        if label == "mlp_bwd" and phase[0] == "bwd-lmhead": phase[0] = "bwd-layers"
        t0 = time.perf_counter(); r = f(*a, **k); acc[label] += time.perf_counter() - t0
        if label == "lmhead_fwd": phase[0] = "after-fwd"
        return r
    setattr(cls, name, staticmethod(w))
timed(LP._LinearLogProbs, "forward", "lmhead_fwd"); timed(LP._LinearLogProbs, "backward", "lmhead_bwd")
timed(LL.SwiGLUMLP, "forward", "mlp_fwd"); timed(LL.SwiGLUMLP, "backward", "mlp_bwd")
ou = U.ppo_update
def upd(*a, **k):
    phase[0] = "update"
    t0 = time.perf_counter(); r = ou(*a, **k); acc["update"] += time.perf_counter() - t0; return r
import tagrpo.train.loop as L; L.ppo_update = upd
PP.register_kernel()
from transformers.models.llama import modeling_llama
for name in ("eager", "sdpa", PP.BLOCKS_KERNEL):  # eager: the model's default, registered here to be timed
    f = ALL_ATTENTION_FUNCTIONS[name] if name in ALL_ATTENTION_FUNCTIONS._global_mapping else modeling_llama.eager_attention_forward
    def attn_timed(*a, _f=f, **k):
        t0 = time.perf_counter(); r = _f(*a, **k)
        if phase[0] != "gen":  # the update's calls only
            acc["attn"] += time.perf_counter() - t0
        return r
    AttentionInterface.register(name, attn_timed)
import torch.nn.utils as NU
oc = NU.clip_grad_norm_
def cg(*a, **k):
    phase[0] = "clip+opt"
    t0 = time.perf_counter(); r = oc(*a, **k); acc["clip"] += time.perf_counter() - t0; return r
torch.nn.utils.clip_grad_norm_ = cg
for s_ in (2, 3, 4):
    acc.clear()
    phase[0] = "gen"; peaks.clear()
    m = t.train_step(s_); phase[0] = "after"
    print({k: v >> 20 for k, v in peaks.items()})
    print(s_, m["time/step"], m["time/generate"], m["time/train"], {k: round(v, 3) for k, v in acc.items()}, flush=True)


