"""GPU smoke test: train and evaluate the tiny random model on CUDA, end to end.

NOT YET RUN ON A GPU: written and checked on a CPU-only machine (with --allow-cpu); the first
run on a CUDA machine is the real test, and its numbers belong in benchmarks/RESULTS.md.

What it does, on one CUDA device:
1. Trains `model: tiny` (a random 2-layer Llama, no download) with TA-GRPO for 3 steps in six
   configurations, shared_prefix on/off x LoRA on/off and shared prefix with gradient
   checkpointing (the block-masked one-forward prefix, SDPA with a custom mask on CUDA) and
   bf16 AdamW moments (the fused torch.compile kernel: Triton on CUDA; which path ran is
   recorded as "bf16_adamw"), and with selective checkpointing, all with beta = 0.01 (a frozen reference
   model, or the LoRA base with the adapter disabled) and `device: cuda`, bf16 autocast, a toy
   parity reward (so advantages are non-zero) and rule neighbors on built-in arithmetic problems.
   Each configuration runs `Trainer.setup()` then `Trainer.train()` (checkpoint and `final/`
   included) in this process; per step it records wall time ("time/step", "time/generate",
   "time/train"), and per configuration the peak GPU memory (`torch.cuda.max_memory_allocated`,
   reset before each configuration) and the device of the policy, the reference and the rollout
   engine (all must be CUDA).
2. Runs `python -m tagrpo.cli eval --device cuda` as a subprocess on the last configuration's
   `final/` model (LoRA merged) with a 4-question arithmetic file it writes itself (n=4, k=1,2,4,
   16 new tokens, bf16 sampling) and records the exit status and the pass@k line.
3. Prints everything, writes it as JSON to --out, and exits 1 if any part failed (an exception,
   a tensor on the wrong device, a non-finite update, a failed eval), else 0.

Run (from the repository root, in the project's environment):

    python benchmarks/gpu_smoke.py --out benchmarks/gpu_smoke.json

Without a CUDA device it prints "no CUDA device: nothing to run" and exits 0. `--allow-cpu`
runs the same thing on the CPU with 1 step per configuration, to check the script itself.
Expected to take about a minute on a GPU (a guess: never measured); 1-2 minutes on a 2-core CPU.

Only torch (and the standard library) is imported at module level; tagrpo imports the rest
lazily when a configuration runs.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
# (name, shared_prefix, lora, extra settings); the last one's final/ model is evaluated (LoRA merged on save)
CONFIGS = [
    ("shared_prefix=on lora=off", True, False, []),
    ("shared_prefix=off lora=off", False, False, []),
    ("shared_prefix=on gradient_checkpointing=on optimizer_state=bf16 (the demo's memory settings)", True, False,
     ["gradient_checkpointing=true", "optimizer_state=bf16", "bf16_adamw_kernel=fused"]),
    ("shared_prefix=on gradient_checkpointing=on gradient_checkpointing_mode=selective", True, False,
     ["gradient_checkpointing=true", "gradient_checkpointing_mode=selective"]),
    ("shared_prefix=on lora=on", True, True, []),
    ("shared_prefix=off lora=on", False, True, []),
]
COMMON = [
    "model=tiny", "algorithm=ta-grpo", "train_data=arith", "arith_size=16", "arith_difficulty=1", "neighbors=rules",
    "num_neighbors=2", "samples_per_variant=4", "questions_per_step=2", "max_new_tokens=16", "beta=0.01",
    "lr=1e-3", "reward=tagrpo.rewards.toy:parity_reward", "micro_batch_tokens=512", "generate_batch_size=32",
    "tensorboard=false", "save_final=true", "keep_checkpoints=1", "warmup_ratio=0", "schedule=constant",
]
STEP_KEYS = ("time/step", "time/generate", "time/train", "reward/mean", "loss/total", "loss/kl", "train/nonfinite_skips")


def _ensure_importable() -> dict:
    """Make `tagrpo` importable here and in the eval subprocess (src/ layout without an install)."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", COLUMNS="200")
    try:
        import tagrpo  # noqa: F401
    except ImportError:
        src = str(REPO / "src")
        sys.path.insert(0, src)
        env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _mib(n: int) -> float:
    return round(n / 2**20, 1)


def _device_of(module) -> str | None:
    if module is None:
        return None
    p = next(iter(module.parameters()), None)
    return str(p.device) if p is not None else None


def run_config(name: str, shared_prefix: bool, lora: bool, extra: list[str], device: str, steps: int, autocast: str,
               run_dir: Path) -> dict:
    """Train one configuration; returns its record (never raises)."""
    out: dict = {"name": name, "shared_prefix": shared_prefix, "lora": lora, "ok": False, "steps": [], "error": None,
                 "output_dir": str(run_dir)}
    cuda = device == "cuda"
    trainer = None
    try:
        from tagrpo.train.config import load_config
        from tagrpo.train.loop import Trainer

        overrides = [*COMMON, f"output_dir={run_dir}", f"device={device}", f"steps={steps}", f"autocast={autocast}",
                     f"shared_prefix={str(shared_prefix).lower()}", f"lora={str(lora).lower()}", *extra]
        out["overrides"] = overrides
        cfg = load_config(None, overrides)
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        trainer = Trainer(cfg)
        trainer.setup()
        out["setup_s"] = round(time.perf_counter() - t0, 3)
        policy = trainer.acc.unwrap_model(trainer.model)
        out["devices"] = {"trainer": str(trainer.device), "policy": _device_of(policy),
                          "reference": _device_of(trainer.ref_model), "engine": str(trainer.engine.device)}
        out["shared_prefix_active"] = bool(trainer.shared_prefix)

        def on_step(m: dict) -> None:
            out["steps"].append({"step": m["step"], **{k: m.get(k) for k in STEP_KEYS}})

        t1 = time.perf_counter()
        trainer.train(progress=on_step)
        out["train_s"] = round(time.perf_counter() - t1, 3)
        if "optimizer_state=bf16" in extra:
            from tagrpo.train import optim

            out["bf16_adamw"] = "fused kernel" if optim._COMPILED.get("fn") is not None else "eager (kernel not built)"
        if cuda:
            torch.cuda.synchronize()
            out["peak_gpu_mem_mib"] = _mib(torch.cuda.max_memory_allocated())
            out["peak_gpu_reserved_mib"] = _mib(torch.cuda.max_memory_reserved())
        final = run_dir / "final"
        out["final"] = str(final) if (final / "config.json").exists() else None

        problems = []
        wrong = {k: v for k, v in out["devices"].items() if v is not None and not v.startswith(device)}
        if wrong:
            problems.append(f"not on {device}: {wrong}")
        if lora and out["devices"]["reference"] is not None:
            problems.append("LoRA run built a separate reference model")
        if not lora and out["devices"]["reference"] is None:
            problems.append("beta > 0 without LoRA but no reference model")
        if out["shared_prefix_active"] != shared_prefix:
            problems.append(f"shared_prefix {shared_prefix} asked, {out['shared_prefix_active']} active")
        if len(out["steps"]) != steps:
            problems.append(f"{len(out['steps'])} steps logged, {steps} asked")
        for s in out["steps"]:
            if s.get("train/nonfinite_skips"):
                problems.append(f"step {s['step']}: non-finite update skipped")
            if s.get("loss/total") is None or not math.isfinite(s["loss/total"]):
                problems.append(f"step {s['step']}: loss/total {s.get('loss/total')}")
        if out["final"] is None:
            problems.append("no final/ model written")
        out["error"] = "; ".join(problems) or None
        out["ok"] = not problems
    except Exception as e:  # noqa: BLE001 - a smoke test records every failure and goes on
        out["error"] = f"{type(e).__name__}: {e}"
        out["traceback"] = traceback.format_exc()
        if cuda:
            with contextlib.suppress(Exception):
                out["peak_gpu_mem_mib"] = _mib(torch.cuda.max_memory_allocated())
    finally:
        del trainer
        gc.collect()
        if cuda:
            with contextlib.suppress(Exception):
                torch.cuda.empty_cache()
    return out


def run_eval(model_dir: str | None, device: str, dtype: str, work: Path, env: dict) -> dict:
    """`tagrpo eval` as a subprocess on model_dir with a 4-question arithmetic file."""
    out: dict = {"ok": False, "model": model_dir, "returncode": None, "pass_at_k_line": None, "error": None}
    if model_dir is None:
        out["error"] = "no final/ model to evaluate (the last configuration failed)"
        return out
    from tagrpo.data.arith import generate_problems

    data = work / "arith4.jsonl"
    with data.open("w", encoding="utf-8") as f:
        for r in generate_problems(4, difficulty=1, seed=7):
            f.write(json.dumps({"id": r["id"], "question": r["question"], "answer": r["answer"]}) + "\n")
    result = work / "eval.json"
    cmd = [sys.executable, "-m", "tagrpo.cli", "eval", "--model", model_dir, "--data", str(data), "--device", device,
           "--dtype", dtype, "--n", "4", "--k", "1,2,4", "--max-new-tokens", "16", "--batch-size", "16", "--seed", "0",
           "--quiet", "--no-diversity", "--output", str(result)]
    out["cmd"] = cmd
    t0 = time.perf_counter()
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, check=False)
    except subprocess.TimeoutExpired:
        out["error"] = "tagrpo eval timed out after 900 s"
        return out
    out["wall_s"] = round(time.perf_counter() - t0, 3)
    out["returncode"] = res.returncode
    lines = [ln.strip() for ln in res.stderr.splitlines() if "pass@" in ln]
    out["pass_at_k_line"] = lines[-1] if lines else None
    if res.returncode != 0:
        out["error"] = f"exit status {res.returncode}"
        out["stderr_tail"] = res.stderr[-4000:]
        return out
    try:
        doc = json.loads(result.read_text(encoding="utf-8"))
        bench = next(iter(doc["models"][0]["benchmarks"].values()))
        out["pass@k"] = bench["pass@k"]
        out["settings_device"] = doc["settings"].get("device")
        out["n_questions"], out["n_samples"] = bench["n_questions"], bench["n_samples"]
    except Exception as e:  # noqa: BLE001
        out["error"] = f"unreadable eval output {result}: {type(e).__name__}: {e}"
        return out
    problems = []
    if out["pass_at_k_line"] is None:
        problems.append("no pass@k line on stderr")
    if out["settings_device"] != device:
        problems.append(f"eval ran on {out['settings_device']}, not {device}")
    if out["n_questions"] != 4 or out["n_samples"] != 4:
        problems.append(f"{out['n_questions']} questions x {out['n_samples']} samples, expected 4 x 4")
    out["error"] = "; ".join(problems) or None
    out["ok"] = not problems
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "gpu_smoke.json", help="JSON report path.")
    ap.add_argument("--allow-cpu", action="store_true", help="Without CUDA, run the same on the CPU (1 step per configuration).")
    ap.add_argument("--steps", type=int, default=None, help="Steps per configuration (default: 3 on CUDA, 1 on the CPU).")
    ap.add_argument("--autocast", choices=("bf16", "none"), default="bf16", help="Training autocast and sampling dtype.")
    ap.add_argument("--work-dir", type=Path, default=None, help="Keep runs here (default: a temporary directory, removed).")
    args = ap.parse_args(argv)

    if torch.cuda.is_available():
        device = "cuda"
    elif args.allow_cpu:
        device = "cpu"
    else:
        print("no CUDA device: nothing to run")
        return 0
    steps = args.steps or (3 if device == "cuda" else 1)
    env = _ensure_importable()
    import transformers

    import tagrpo

    report: dict = {
        "device": device,
        "device_name": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "torch": torch.__version__, "cuda": torch.version.cuda, "transformers": transformers.__version__,
        "tagrpo": getattr(tagrpo, "__version__", None), "steps_per_config": steps, "autocast": args.autocast,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "configs": [], "eval": None,
    }
    print(f"gpu_smoke: device {report['device_name']} ({device}), torch {torch.__version__}, {steps} step(s) per configuration")
    tmp = None
    if args.work_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="gpu_smoke-")
        work = Path(tmp.name)
    else:
        work = args.work_dir
        work.mkdir(parents=True, exist_ok=True)
    try:
        for i, (name, sp, lora, extra) in enumerate(CONFIGS):
            rec = run_config(name, sp, lora, extra, device, steps, args.autocast, work / f"run{i}")
            report["configs"].append(rec)
            times = " ".join(f"{s['time/step']:.2f}s" for s in rec["steps"] if s.get("time/step") is not None)
            mem = f"  peak GPU {rec['peak_gpu_mem_mib']} MiB" if "peak_gpu_mem_mib" in rec else ""
            kernel = f"  bf16 AdamW: {rec['bf16_adamw']}" if "bf16_adamw" in rec else ""
            print(f"[{'ok' if rec['ok'] else 'FAIL'}] {name}: steps {times or '-'}{mem}  devices {rec.get('devices')}{kernel}")
            if rec["error"]:
                print(f"    error: {rec['error']}")
            if rec.get("traceback"):
                print("    " + rec["traceback"].rstrip().replace("\n", "\n    "))
        last = report["configs"][-1].get("final")
        ev = run_eval(last, device, "bf16" if args.autocast == "bf16" else "fp32", work, env)
        report["eval"] = ev
        print(f"[{'ok' if ev['ok'] else 'FAIL'}] tagrpo eval --device {device}: exit status {ev['returncode']}  "
              f"{ev['pass_at_k_line'] or ''}")
        if ev["error"]:
            print(f"    error: {ev['error']}")
        if ev.get("stderr_tail"):
            print("    " + ev["stderr_tail"].rstrip().replace("\n", "\n    "))
    finally:
        if tmp is not None:
            tmp.cleanup()
    report["ok"] = all(c["ok"] for c in report["configs"]) and bool(report["eval"] and report["eval"]["ok"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1, default=str) + "\n", encoding="utf-8")
    print(f"{'all parts passed' if report['ok'] else 'SOME PARTS FAILED'}; wrote {args.out}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
