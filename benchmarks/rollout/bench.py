"""Rollout engine throughput against the machine's bound, before and after (issue 15).

Measures, in one process on a quiet machine:
- the bound: memory read bandwidth (sum over a 1 GiB tensor) and the GEMM rate of one decode
  step's products at the workload's row count (every projection and the lm_head of the model, in
  the faster of the two orientations, weights cycled so they come from memory, not cache). One
  decode step must read every weight once and do 2 x parameters x rows FLOPs, so
  bound tokens/s = rows / max(weight bytes / bandwidth, step FLOPs / GEMM rate);
- the engine: `HFGenerateEngine.generate` on the speed benchmark's workload (4 prompts x 4
  samples of built-in arithmetic problems in the chat template, up to 64 new tokens, T=0.6,
  per-row seeds), with `fast_decode=False` (transformers' forward and dynamic cache: the engine
  before issue 15) and `fast_decode=True` (rollout/decode.py), interleaved, same seeds, so both
  sample the same tokens when the arithmetic allows (checked and reported);
- the same at 32 rows (the demo's step: 2 questions x 4 variants x 4 samples).

    .venv/bin/python benchmarks/rollout/bench.py --reps 4 --out benchmarks/rollout/results.json
    .venv/bin/python benchmarks/rollout/bench.py --reps 4 --dtype bf16 --out ...   # CPUs with bf16 units
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from machine import commit, cpu_name  # benchmarks/machine.py

TEMPLATE = "{question}\nPut your final answer within \\boxed{{}}."


def bandwidth_gbs(reps: int = 5) -> float:
    x = torch.ones(256 * 2**20)  # 1 GiB of float32
    x.sum()
    best = min(_timed(x.sum) for _ in range(reps))
    return x.numel() * 4 / best / 1e9


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def step_gemm(model, rows: int, reps: int = 5, dtype: torch.dtype = torch.float32) -> dict:
    """Seconds of one decode step's products at `rows` rows, with fresh copies of the weight
    shapes cycled (so weights stream from memory as in a real step), in `dtype`."""
    shapes = [tuple(m.weight.shape) for m in model.modules() if isinstance(m, torch.nn.Linear)]
    flops = sum(2 * rows * o * i for o, i in shapes)
    nbytes = sum(torch.finfo(dtype).bits // 8 * o * i for o, i in shapes)
    weights = [torch.randn(s, dtype=dtype) for s in shapes]
    x = {i: torch.randn(rows, i, dtype=dtype) for _, i in shapes}
    out = {}
    for name, fn in (("x@W^T", lambda w: torch.nn.functional.linear(x[w.shape[1]], w)),
                     ("W@x^T", lambda w: torch.mm(w, x[w.shape[1]].t()))):
        for w in weights:
            fn(w)
        out[name] = min(_timed(lambda: [fn(w) for w in weights]) for _ in range(reps))
    best = min(out.values())
    return {"rows": rows, "flops": flops, "weight_bytes": nbytes, "seconds": out,
            "gflops": flops / best / 1e9}


def workload(tok, questions: int, samples: int) -> list[list[int]]:
    from tagrpo.data.arith import generate_problems

    rows = generate_problems(max(questions, 4), 1, seed=0, id_prefix="bench")[:questions]
    prompts = []
    for r in rows:
        ids = tok.apply_chat_template([{"role": "user", "content": TEMPLATE.format(question=r["question"])}],
                                      add_generation_prompt=True, tokenize=True)
        ids = ids["input_ids"] if hasattr(ids, "keys") else ids
        prompts += [list(ids)] * samples
    return prompts


def run_engine(model, tok, prompts, reps: int, max_new: int, dtype: str = "fp32") -> dict:
    from tagrpo.rollout import HFGenerateEngine, SamplingParams

    params = SamplingParams(max_new_tokens=max_new, temperature=0.6, top_p=1.0, do_sample=True)
    engine = HFGenerateEngine(model, tok, max_batch_size=64, dtype=dtype)  # bf16: the trainer's bf16 rollout copy
    # bf16: also the fast decoder without its oneDNN-packed weights (rollout/packing.py)
    arms = [("before", False, True), ("after", True, True)] + ([("after-unpacked", True, False)] if dtype == "bf16" else [])
    res: dict[str, list] = {name: [] for name, *_ in arms}
    tokens: dict[str, list] = {}
    engine.generate(prompts[:2], params, seeds=[0, 1])  # warm-up (allocator, first-call costs)
    for rep in range(reps):
        seeds = [1000 * rep + i for i in range(len(prompts))]
        for name, fast, prepack in arms:
            engine.fast_decode, engine.prepack = fast, prepack
            t = time.perf_counter()
            out = engine.generate(prompts, params, seeds=seeds)
            dt = time.perf_counter() - t
            n = sum(len(c.token_ids) for c in out)
            res[name].append({"seconds": dt, "tokens": n, "tok_s": n / dt})
            tokens.setdefault(name, []).append([c.token_ids for c in out])
    same = sum(a == b for a, b in zip(tokens["before"], tokens["after"]))
    summary = {k: {"median_tok_s": statistics.median(r["tok_s"] for r in v), "runs": v} for k, v in res.items()}
    summary["speedup"] = summary["after"]["median_tok_s"] / summary["before"]["median_tok_s"]
    if "after-unpacked" in summary:
        summary["packed_over_unpacked"] = summary["after"]["median_tok_s"] / summary["after-unpacked"]["median_tok_s"]
    summary["identical_token_reps"] = f"{same}/{reps}"
    return summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32",
                    help="the engine's dtype (bf16: the bf16 rollout copy the trainer uses where the CPU has bf16 units); "
                         "the bound's weight bytes and GEMM rate are measured in the same dtype")
    args = ap.parse_args()

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tagrpo.models.loader import resolve_model_path

    path = resolve_model_path("smollm2-135m-instruct")
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    result = {"machine": cpu_name(), "threads": torch.get_num_threads(), "torch": torch.__version__,
              "commit": commit(), "python": platform.python_version(), "dtype": args.dtype}
    result["bandwidth_gbs"] = bandwidth_gbs()
    for rows, (questions, samples) in ((16, (4, 4)), (32, (8, 4))):
        gemm = step_gemm(model, rows, dtype=torch.bfloat16 if args.dtype == "bf16" else torch.float32)
        t_mem = gemm["weight_bytes"] / (result["bandwidth_gbs"] * 1e9)
        t_gemm = gemm["flops"] / (gemm["gflops"] * 1e9)
        bound = rows / max(t_mem, t_gemm)
        eng = run_engine(model, tok, workload(tok, questions, samples), args.reps, args.max_new, args.dtype)
        result[f"rows{rows}"] = {"gemm": gemm, "bound_tok_s": bound, "bound_by": "gemm" if t_gemm > t_mem else "memory",
                                 "engine": eng}
        print(f"{rows} rows: bound {bound:.0f} tok/s ({'GEMM' if t_gemm > t_mem else 'memory'}: step GEMMs "
              f"{gemm['gflops']:.0f} GFLOP/s, weights {t_mem * 1e3:.0f} ms at {result['bandwidth_gbs']:.1f} GB/s); "
              f"engine before {eng['before']['median_tok_s']:.0f} tok/s, after {eng['after']['median_tok_s']:.0f} "
              f"tok/s ({eng['speedup']:.2f}x; {eng['after']['median_tok_s'] / bound:.0%} of the bound); "
              f"identical tokens in {eng['identical_token_reps']} reps"
              + (f"; unpacked bf16 weights {eng['after-unpacked']['median_tok_s']:.0f} tok/s "
                 f"(packed {eng['packed_over_unpacked']:.2f}x)" if "after-unpacked" in eng else ""), flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
