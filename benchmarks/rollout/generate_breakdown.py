"""Where one bf16 `generate` call of the speed benchmark's workload goes (4 questions x 4 samples
= 16 rows, 64 new tokens, temperature 1, the trainer's bf16 rollout copy): the fast decoder's
steps, sampling, and the rest (prefill, the bf16 copy, packing, bookkeeping); session 14.

    .venv/bin/python benchmarks/rollout/generate_breakdown.py

Run it on a quiet machine.
"""

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import workload  # benchmarks/rollout/bench.py

from tagrpo.rollout import HFGenerateEngine, SamplingParams
from tagrpo.rollout import decode as D
from tagrpo.rollout import hf as HF


def timed(fn, key: str, acc: dict):
    def wrapper(*a, **k):
        t = time.perf_counter()
        r = fn(*a, **k)
        acc[key] += time.perf_counter() - t
        acc["n_" + key] += 1
        return r
    return wrapper


def main() -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tagrpo.models import embedded_model_dir

    torch.set_num_threads(2)
    path = embedded_model_dir()
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    prompts = workload(tok, 4, 4)
    params = SamplingParams(max_new_tokens=64, temperature=1.0, top_p=1.0, do_sample=True)
    engine = HFGenerateEngine(model, tok, max_batch_size=64, dtype="bf16")
    engine.generate(prompts[:2], params, seeds=[0, 1])  # warm-up
    acc: dict = {}
    D.FastDecoder.step = timed(D.FastDecoder.step, "step", acc)
    HF.sample_tokens = timed(HF.sample_tokens, "sample", acc)
    for rep in range(3):
        acc.update(step=0.0, sample=0.0, n_step=0, n_sample=0)
        t = time.perf_counter()
        out = engine.generate(prompts, params, seeds=list(range(100 * rep, 100 * rep + len(prompts))))
        dt = time.perf_counter() - t
        n = sum(len(c.token_ids) for c in out)
        print(f"total {dt:.2f} s, {n} tokens, {n / dt:.0f} tok/s; steps {acc['n_step']} {acc['step']:.2f} s "
              f"({acc['step'] / max(1, acc['n_step']) * 1e3:.1f} ms each); sampling {acc['sample']:.2f} s; "
              f"rest {dt - acc['step'] - acc['sample']:.2f} s", flush=True)


if __name__ == "__main__":
    main()
