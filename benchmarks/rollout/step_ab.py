"""One decode step of the fast decoder, two source trees side by side (issue 15).

`rollout/decode.py` of each tree is loaded as its own module into one process; both decode the
same bf16 SmolLM2-135M-Instruct (the trainer's bf16 rollout copy) from the same prefill of the
speed benchmark's prompts (4 or 8 arithmetic questions x 4 samples = 16 or 32 rows), greedy,
`--steps` steps, with each tree's own packed weights (`pack_linears`), interleaved `--reps` times.
Prints the median ms a step per tree and whether the last step's logits are bit-identical.

    git worktree add /tmp/base REV
    .venv/bin/python benchmarks/rollout/step_ab.py --before /tmp/base/src --after src --out FILE.json

bf16 needs a CPU with bf16 units (oneDNN bf16 kernels); `--dtype fp32` runs the float32 step
(MKL products, nothing packed). Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import workload  # benchmarks/rollout/bench.py
from machine import commit, cpu_name  # benchmarks/machine.py


def load_module(src: str, stem: str, name: str):
    """tagrpo/rollout/<stem>.py of the tree `src`, as module `name`."""
    spec = importlib.util.spec_from_file_location(name, Path(src) / "tagrpo" / "rollout" / f"{stem}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def load_tree(src: str, name: str):
    """(decode module, its pack_linears) of the tree `src` (older trees keep pack_linears in decode.py)."""
    dec = load_module(src, "decode", f"{name}_decode")
    pack = getattr(dec, "pack_linears", None)
    if pack is None:
        pack = load_module(src, "packing", f"{name}_packing").pack_linears
    return dec, pack


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", required=True, help="src/ of the tree to compare against")
    ap.add_argument("--after", default="src")
    ap.add_argument("--steps", type=int, default=48)
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16", help="fp32: MKL products, nothing packed")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    torch.set_num_threads(2)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tagrpo.models import embedded_model_dir
    from tagrpo.rollout.batching import left_pad, output_cache

    trees = {"before": load_tree(a.before, "before"), "after": load_tree(a.after, "after")}
    path = embedded_model_dir()
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    for p in model.parameters():
        p.requires_grad_(False)
        p.data = p.data.to(torch.bfloat16 if a.dtype == "bf16" else torch.float32)
    doc = {"cpu": cpu_name(), "commit": commit(), "command": " ".join(sys.argv), "dtype": a.dtype, "when": time.strftime("%Y-%m-%d %H:%M"),
           "torch": torch.__version__, "rows": {}}
    for q in (4, 8):
        prompts = workload(tok, q, 4)
        ids, att, pos = left_pad(prompts, tok.pad_token_id)  # (b, L) each
        with torch.no_grad():
            out = model(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=True)
        cache = output_cache(out)
        packs = {name: pack(model, rows=16) for name, (_, pack) in trees.items()}
        ms: dict[str, list] = {name: [] for name in trees}
        last = {}
        for _ in range(a.reps):
            for name, (dec, _) in trees.items():
                fd = dec.FastDecoder(model, packed=packs[name])
                fd.load(copy.deepcopy(cache), att)
                tokens, p = torch.full((len(prompts),), 28, dtype=torch.long), pos[:, -1] + 1  # (b,) each
                t = time.perf_counter()
                for _ in range(a.steps):
                    logits = fd.step(tokens, p)  # (b, V)
                    p, tokens = p + 1, logits.argmax(-1)
                ms[name].append((time.perf_counter() - t) / a.steps * 1e3)
                last[name] = logits
        med = {name: statistics.median(v) for name, v in ms.items()}
        same = torch.equal(last["before"], last["after"])
        doc["rows"][len(prompts)] = {"ms_per_step": ms, "median": med, "speedup": med["before"] / med["after"], "same_logits": same}
        print(f"{len(prompts)} rows: ms a step before {med['before']:.1f} ({[round(x, 1) for x in ms['before']]}), after "
              f"{med['after']:.1f} ({[round(x, 1) for x in ms['after']]}): {med['before'] / med['after']:.2f}x; "
              f"last step's logits bit-identical: {same}", flush=True)
    if a.out:
        a.out.write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
