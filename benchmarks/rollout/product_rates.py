"""Per-shape rate of the bf16 decode step's packed products (SmolLM2-135M's shapes, 16 and 32
rows, random weights packed for oneDNN as rollout/packing.py does) and the machine's copy
bandwidth: how close the products are to issue 15's bound (session 14).

    .venv/bin/python benchmarks/rollout/product_rates.py

Needs a CPU with bf16 units. Run it on a quiet machine.
"""

import time

import torch

SHAPES = {"qkv": (960, 576), "o": (576, 576), "gu": (3072, 576), "down": (576, 1536), "lm_head": (49152, 576)}


def best_of(fn, reps: int = 5) -> float:
    fn()
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    torch.set_num_threads(2)
    for rows in (16, 32):
        total = 0.0
        for name, (out, inp) in SHAPES.items():
            n = 1 if name == "lm_head" else 30  # one per layer
            ws = [torch.ops.mkldnn._reorder_linear_weight(torch.randn(out, inp).bfloat16(), 16) for _ in range(n)]
            x = torch.randn(rows, inp).bfloat16()
            each = best_of(lambda ws=ws, x=x: [torch.ops.mkldnn._linear_pointwise(x, w, None, "none", [], "") for w in ws]) / n
            total += each * n
            print(f"rows {rows} {name:8s} {each * 1e6:7.1f} us  {out * inp * 2 / each / 1e9:5.1f} GB/s  "
                  f"{2 * rows * out * inp / each / 1e9:6.1f} GFLOP/s  x{n} = {each * n * 1e3:.2f} ms")
        print("total products ms", round(total * 1e3, 2))
    a = torch.empty(256 * 2**20 // 4)
    b = torch.empty_like(a)
    print("copy GB/s (read+write)", round(2 * a.numel() * 4 / best_of(lambda: b.copy_(a)) / 1e9, 1))


if __name__ == "__main__":
    main()
