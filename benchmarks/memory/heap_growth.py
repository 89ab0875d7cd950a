"""glibc heap and live tensors after each training step of the demo config (session 6, issue 12):
tensor storages reachable from Python, the heap (mallinfo2: size, in use, free) and the object
count, so growth of the heap that no tensor explains shows. Linux/glibc only; a quiet machine.

    .venv/bin/python benchmarks/memory/heap_growth.py            # NSTEPS=10 for more steps
    ONEDNN_PRIMITIVE_CACHE_CAPACITY=64 NSTEPS=10 .venv/bin/python benchmarks/memory/heap_growth.py
"""
import collections
import gc
import sys
import tempfile

import torch

sys.path.insert(0, __import__("os").path.dirname(__file__))
from phases import _heap

import tagrpo.train.loop as L
from tagrpo.demo import preset_path
from tagrpo.train.config import load_config


def census():
    seen=set(); tot=0; n=collections.Counter()
    for o in gc.get_objects():
        n[type(o).__name__]+=1
        try:
            if isinstance(o, torch.Tensor):
                st=o.untyped_storage(); k=st.data_ptr()
                if k in seen: continue
                seen.add(k); tot+=st.nbytes()
        except Exception:  # noqa: BLE001, S110 - a census over gc objects: skip any that cannot be read
            pass
    return tot/2**20, n
with tempfile.TemporaryDirectory() as tmp:
    cfg = load_config(preset_path("demo"), [f"output_dir={tmp}/run", "steps=6"])
    t = L.Trainer(cfg); t.setup()
    prev=None
    for step in range(int(__import__("os").environ.get("NSTEPS", "5"))):
        m = t.train_step(step)
        tb, n = census()
        print("step", step, f"{m['time/step']:.1f}s gen {m['time/generate']:.1f} train {m['time/train']:.1f}", f"tensors {tb:.0f} MB", _heap(), "objs", sum(n.values()), flush=True)
        if prev: print("   growth", [(k,v-prev[k]) for k,v in n.most_common(400) if v-prev[k]>200][:8])
        prev=n
