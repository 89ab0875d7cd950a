"""`lean_layers` on and off, side by side: one forward + backward of the embedded SmolLM2-135M on a
micro-batch of the speed benchmark's size, time and the bytes autograd saves for backward.

Per dtype (fp32, and bf16 autocast where the CPU has bf16 units, as `autocast: auto` chooses),
the two settings alternate rep by rep on the same inputs (the same process, the same weights), so
the ratio is not a comparison across machine states. Saved bytes are counted with
`tagrpo.train.lean_layers.saved_tensor_bytes` (distinct storages, parameters left out): the
activation memory one micro-batch holds at the end of its forward.

    .venv/bin/python benchmarks/memory/lean_layers_bench.py --reps 5 --out benchmarks/memory/results/lean_layers.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path


def main() -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from tagrpo.models.loader import embedded_model_dir
    from tagrpo.train.lean_layers import patch_model, saved_tensor_bytes, unpatch_model
    from tagrpo.train.model import bf16_is_fast

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=124, help="tokens a row (prompt + response)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()

    model = AutoModelForCausalLM.from_pretrained(embedded_model_dir(), dtype=torch.float32, attn_implementation="eager")
    model.train()
    ids = torch.randint(0, model.config.vocab_size, (a.rows, a.tokens), generator=torch.Generator().manual_seed(0))
    dtypes = ["fp32"] + (["bf16"] if bf16_is_fast(torch.device("cpu")) else [])
    res: dict = {"rows": a.rows, "tokens_per_row": a.tokens, "torch": torch.__version__, "machine": platform.processor() or platform.machine(),
                 "results": {}}
    for dt in dtypes:
        ac = {"device_type": "cpu", "dtype": torch.bfloat16, "enabled": dt == "bf16"}

        def step(ac=ac):
            model.zero_grad(set_to_none=True)
            t0 = time.perf_counter()
            with torch.autocast(**ac):
                h = model.model(input_ids=ids).last_hidden_state
            h.float().pow(2).mean().backward()  # no lm-head: tagrpo's head runs in chunks outside the model
            return time.perf_counter() - t0

        times: dict[str, list[float]] = {"off": [], "on": []}
        mem = {}
        for on in ("off", "on"):
            (patch_model if on == "on" else unpatch_model)(model)
            with torch.autocast(**ac):
                mem[on] = saved_tensor_bytes(lambda: model.model(input_ids=ids), exclude=model.parameters())
            step()  # warm-up
        for _ in range(a.reps):
            for on in ("off", "on"):
                (patch_model if on == "on" else unpatch_model)(model)
                times[on].append(step())
        unpatch_model(model)
        tok = a.rows * a.tokens
        r = {on: {"fwd_bwd_s_median": statistics.median(times[on]), "fwd_bwd_s": times[on],
                  "saved_MB": mem[on] / 2**20, "saved_MB_per_token": mem[on] / 2**20 / tok} for on in times}
        r["time_on_over_off"] = r["on"]["fwd_bwd_s_median"] / r["off"]["fwd_bwd_s_median"]
        r["saved_on_over_off"] = mem["on"] / mem["off"]
        res["results"][dt] = r
        print(f"{dt}: saved {r['off']['saved_MB']:.0f} -> {r['on']['saved_MB']:.0f} MB "
              f"({r['off']['saved_MB_per_token']:.3f} -> {r['on']['saved_MB_per_token']:.3f} MB/token, x{r['saved_on_over_off']:.2f}); "
              f"fwd+bwd {r['off']['fwd_bwd_s_median']:.2f} -> {r['on']['fwd_bwd_s_median']:.2f} s (x{r['time_on_over_off']:.3f})", flush=True)
    if a.out:
        a.out.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
