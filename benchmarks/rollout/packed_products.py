"""All of SmolLM2-135M's decode-step product shapes at ROWS rows in bf16: F.linear, W @ x^T, and
weights packed once for oneDNN (torch.ops.mkldnn._reorder_linear_weight + _linear_pointwise), and
whether packed equals F.linear bit for bit (session 6, issue 15; CPUs with bf16 units).

    .venv/bin/python benchmarks/rollout/packed_products.py 16
"""
import time

import torch
import torch.nn.functional as F

torch.manual_seed(0)
shapes = [(576,576),(192,576),(192,576),(576,576),(1536,576),(1536,576),(576,1536)]*30 + [(49152,576)]
rows = int(__import__("sys").argv[1]) if len(__import__("sys").argv) > 1 else 16
ws = [torch.randn(s, dtype=torch.bfloat16) for s in shapes]
xs = {i: torch.randn(rows, i, dtype=torch.bfloat16) for _, i in shapes}
print("mkldnn bf16 supported", torch.ops.mkldnn._is_mkldnn_bf16_supported())
packed = [torch.ops.mkldnn._reorder_linear_weight(w, rows) for w in ws]
def t(fn, reps=5):
    fn(); best = 1e9
    for _ in range(reps):
        t0 = time.perf_counter(); fn(); best = min(best, time.perf_counter() - t0)
    return best
flops = sum(2 * rows * o * i for o, i in shapes)
a = t(lambda: [F.linear(xs[w.shape[1]], w) for w in ws])
b = t(lambda: [torch.mm(w, xs[w.shape[1]].t()) for w in ws])
c = t(lambda: [torch.ops.mkldnn._linear_pointwise(xs[w.shape[1]], p, None, "none", [], "") for w, p in zip(ws, packed)])
print(f"rows {rows}: F.linear {a*1e3:.1f} ms ({flops/a/1e9:.0f} GFLOP/s), W@x^T {b*1e3:.1f} ms, prepacked {c*1e3:.1f} ms ({flops/c/1e9:.0f} GFLOP/s)")
y1 = F.linear(xs[576], ws[0]); y2 = torch.ops.mkldnn._linear_pointwise(xs[576], packed[0], None, "none", [], "")
print("max diff", (y1.float() - y2.float()).abs().max().item(), "equal", torch.equal(y1, y2))
