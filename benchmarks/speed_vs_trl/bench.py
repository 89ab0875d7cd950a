"""tagrpo vs TRL GRPOTrainer: seconds per training step on this CPU, side by side (issue 6, part 2).

Same model (the embedded SmolLM2-135M-Instruct, HF format from the tagrpo model cache), same
prompts (built-in arithmetic problems, difficulty 1, in the chat template with the same user
template), the same 16 completions per step, max 64 new tokens, T=0.6, top-p 1, top-k 0,
bf16 autocast where the CPU has fast bf16 matmuls (else fp32 for both: `--dtype`), beta 0 (no reference model), one PPO epoch, token-mean loss (TRL "dapo"), and
one micro-batch per step (TRL: per_device_train_batch_size 16, no gradient accumulation;
tagrpo: micro_batch_tokens large enough for all rows):

- trl-grpo:        TRL GRPOTrainer, 4 prompts x 4 completions
- tagrpo-grpo:     tagrpo, algorithm grpo, 4 questions x G=4
- tagrpo-grpo-noskip: the same with skip_zero_adv off (every row runs forward/backward, as in TRL)
- tagrpo-ta-grpo:  tagrpo, algorithm ta-grpo, 1 question x (N=3 neighbors + 1) x G=4
- trl-grpo-tuned:  TRL again with the two settings tagrpo's trainer applies by default on CPU
                   (eager attention; glibc malloc keeping freed memory, via MALLOC_MMAP_MAX_=0
                   MALLOC_TRIM_THRESHOLD_), to show how much of the gap they explain

tagrpo's rows use the trainer's defaults (attn_implementation auto = eager on CPU,
keep_freed_memory true, shared_prefix true).

Each configuration runs in its own subprocess (clean peak RSS) for WARMUP + STEPS optimizer
steps; the table holds medians over the timed steps. Generation time for TRL is the time in
`_generate_and_score_completions` (generation, reward, advantages), measured by a subclass that
only wraps it with a timer; train = step - that. A 2048x2048 matmul (in the run's dtype) is timed before and
after the configurations in the parent process as the FLOP/s reference.

    .venv/bin/python benchmarks/speed_vs_trl/bench.py --steps 5 --warmup 1 --out benchmarks/speed_vs_trl

`--baseline-src DIR` (a `src/` of another commit, e.g. from `git worktree add /tmp/base REV`)
adds a `NAME@base` row before each tagrpo row, run from that tree in the same session, so a
change's step time and peak memory are compared side by side with the same TRL reference.
`--variant LABEL:KEY=VAL,...` adds a `NAME+LABEL` row after each tagrpo row, run from this tree
with those settings on top (e.g. `gc:gradient_checkpointing=true`), for memory/speed trade-offs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

TEMPLATE = "{question}\nPut your final answer within \\boxed{{}}."
Q_PER_STEP, G, MAX_NEW, TEMP, LR = 4, 4, 64, 0.6, 1e-5


def _dtype() -> str:
    """The run's compute dtype, chosen by the parent (`--dtype`) and passed to the children."""
    return os.environ.get("TAGRPO_BENCH_DTYPE", "bf16")


def resolve_dtype(choice: str) -> str:
    if choice != "auto":
        return choice
    import torch

    from tagrpo.train.model import bf16_is_fast

    return "bf16" if bf16_is_fast(torch.device("cpu")) else "fp32"
CONFIGS = ["trl-grpo", "tagrpo-grpo", "tagrpo-grpo-noskip", "tagrpo-ta-grpo", "trl-grpo-tuned"]
TUNED_ENV = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(2**31 - 1)}


def rows(n: int = 256) -> list[dict]:
    from tagrpo.data.arith import generate_problems

    return generate_problems(n, 1, seed=0, id_prefix="bench")


# ------------------------------------------------------------------------------ children
class Lockstep:
    """A child's side of `lockstep.py`: with TAGRPO_BENCH_LOCKSTEP="GO_FD,DONE_FD" it writes one
    byte to DONE_FD when set up and after each step, and waits for one on GO_FD before each step;
    without it both are no-ops."""

    def __init__(self, go: int | None = None, done: int | None = None):
        self.go, self.done = go, done

    @classmethod
    def from_env(cls) -> Lockstep:
        spec = os.environ.get("TAGRPO_BENCH_LOCKSTEP", "")
        return cls(*(int(x) for x in spec.split(","))) if spec else cls()

    def signal(self) -> None:
        if self.done is not None:
            os.write(self.done, b".")

    def wait(self) -> None:
        if self.go is not None and os.read(self.go, 1) != b".":
            raise SystemExit("lockstep: the parent closed the pipe")


def child_tagrpo(name: str, steps: int, out: Path, workdir: Path) -> dict:
    from tagrpo.train.config import load_config
    from tagrpo.train.trainer import Trainer

    name = name.split("@")[0].split("+")[0]
    algo = "ta-grpo" if name == "tagrpo-ta-grpo" else "grpo"
    q = 1 if algo == "ta-grpo" else Q_PER_STEP
    sets = [f"algorithm={algo}", "model=smollm2-135m-instruct", "neighbors=rules", "num_neighbors=3",
            f"samples_per_variant={G}", f"questions_per_step={q}", f"max_new_tokens={MAX_NEW}", f"temperature={TEMP}",
            "top_p=1.0", "beta=0.0", f"lr={LR}", "schedule=constant", "warmup_ratio=0.0", f"autocast={'bf16' if _dtype() == 'bf16' else 'none'}",
            "micro_batch_tokens=16384", "generate_batch_size=64", "tensorboard=false", "save_final=false",
            f"steps={steps}", f"output_dir={workdir / 'run'}", "agg=token-mean",
            f"skip_zero_adv={'false' if name.endswith('noskip') else 'true'}"]
    sets += [x for x in os.environ.get("TAGRPO_BENCH_SETS", "").split(",") if x]
    t = Trainer(load_config(None, sets), rows=rows())
    t.setup()
    gate = Lockstep.from_env()  # lockstep.py: one step at a time, taking turns with the other rows
    gate.signal()
    recs = []
    sampled = 0.0  # perf/sampled_tokens is the running total
    for step in range(steps):
        gate.wait()
        m = t.train_step(step)
        gate.signal()
        sampled, new_tokens = m["perf/sampled_tokens"], m["perf/sampled_tokens"] - sampled
        recs.append({"step": m["time/step"], "gen": m["time/generate"] + m["time/reward"], "train": m["time/train"],
                     "completions": m.get("train/rows", 0),
                     "rows_trained": m.get("train/rows", 0) - m.get("train/rows_skipped_zero_adv", 0),
                     "sampled_tokens": new_tokens,
                     "train_tokens": m["train/tokens"],
                     "flop_tokens_fwd_bwd": m["train/computed_tokens_fwd_bwd"], "flop_tokens_fwd": m["train/computed_tokens_fwd"],
                     "reward": m["reward/mean"]})
    n_params = sum(p.numel() for p in t.model.parameters())
    return {"steps": recs, "n_params": n_params}


def child_trl(name: str, steps: int, out: Path, workdir: Path) -> dict:
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

    from tagrpo.models import embedded_model_dir
    from tagrpo.rewards import math_reward

    path = embedded_model_dir()
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    if name == "trl-grpo-tuned":
        model.set_attn_implementation("eager")
    ds = Dataset.from_list([{"prompt": [{"role": "user", "content": TEMPLATE.format(question=r["question"])}],
                             "answer": r["answer"]} for r in rows()])

    def reward(completions, answer, **kw):
        return [math_reward(c[0]["content"], a) for c, a in zip(completions, answer)]

    recs: list[dict] = []
    cur: dict = {}

    class Timed(GRPOTrainer):  # only a timer around the generation phase; the work is TRL's
        def _generate_and_score_completions(self, inputs):
            t0 = time.perf_counter()
            res = super()._generate_and_score_completions(inputs)
            cur["gen"] = cur.get("gen", 0.0) + time.perf_counter() - t0
            cm, pm = res["completion_mask"], res["prompt_mask"]
            cur["sampled_tokens"] = int(cm.sum())
            cur["train_tokens"] = int(cm.sum() + pm.sum())
            cur["flop_tokens_fwd_bwd"] = int(cm.shape[0] * (cm.shape[1] + pm.shape[1]))  # padded rows run in full
            cur["completions"] = int(cm.shape[0])
            return res

    class Clock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            cur.clear()
            cur["t0"] = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            dt = time.perf_counter() - cur.pop("t0")
            recs.append({"step": dt, "gen": cur["gen"], "train": dt - cur["gen"], "completions": cur["completions"],
                         "sampled_tokens": cur["sampled_tokens"], "train_tokens": cur["train_tokens"],
                         "flop_tokens_fwd_bwd": cur["flop_tokens_fwd_bwd"], "flop_tokens_fwd": 0})

    args = GRPOConfig(
        output_dir=str(workdir / "trl"), max_steps=steps, per_device_train_batch_size=Q_PER_STEP * G,
        gradient_accumulation_steps=1, num_generations=G, max_completion_length=MAX_NEW, temperature=TEMP,
        top_p=1.0, top_k=0, beta=0.0, loss_type="dapo", learning_rate=LR, lr_scheduler_type="constant",
        warmup_steps=0, bf16=_dtype() == "bf16", use_cpu=True, logging_steps=1, report_to="none", save_strategy="no",
        shuffle_dataset=False, dataloader_num_workers=0, num_iterations=1, seed=0, disable_tqdm=True,
    )
    tr = Timed(model=model, reward_funcs=reward, args=args, train_dataset=ds, processing_class=tok, callbacks=[Clock()])
    tr.train()
    return {"steps": recs, "n_params": sum(p.numel() for p in model.parameters())}


def child(name: str, steps: int, out: Path) -> None:
    import resource
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        fn = child_trl if name.startswith("trl") else child_tagrpo
        res = fn(name, steps, out, Path(d))
    res["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out.write_text(json.dumps(res))


# ------------------------------------------------------------------------------ parent
def matmul_flops(n: int = 2048, reps: int = 20) -> float:
    import torch

    dt = torch.bfloat16 if _dtype() == "bf16" else torch.float32
    a, b = torch.randn(n, n, dtype=dt), torch.randn(n, n, dtype=dt)
    for _ in range(3):
        a @ b
    t0 = time.perf_counter()
    for _ in range(reps):
        a @ b
    return 2 * n**3 * reps / (time.perf_counter() - t0)


def summarize(name: str, res: dict, warmup: int, peak: float) -> dict:
    timed = res["steps"][warmup:]
    med = lambda k: statistics.median(r[k] for r in timed)  # noqa: E731
    p = res["n_params"]
    # steps whose rows were all skipped (every advantage 0) ran no forward/backward: no FLOP/s
    flops = [(6 * p * r["flop_tokens_fwd_bwd"] + 2 * p * r["flop_tokens_fwd"]) / r["train"] for r in timed
             if r["train"] > 0 and r["flop_tokens_fwd_bwd"] > 0]
    return {
        "config": name, "completions/step": med("completions"), "step s": med("step"), "generate s": med("gen"),
        "train s": med("train"), "sampled tok/s": statistics.median(r["sampled_tokens"] / r["step"] for r in timed),
        "generate tok/s": statistics.median(r["sampled_tokens"] / r["gen"] for r in timed),
        "train tok/s": statistics.median(r["train_tokens"] / r["train"] for r in timed),
        "rows trained/step": statistics.median(r.get("rows_trained", r["completions"]) for r in timed),
        "train GFLOP/s": statistics.median(flops) / 1e9 if flops else float("nan"),
        "vs matmul": statistics.median(flops) / peak if flops else float("nan"),
        "peak RSS MB": res["peak_rss_mb"], "step s (all)": [round(r["step"], 2) for r in res["steps"]],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=5, help="timed optimizer steps per configuration")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--only", default="", help="comma-separated subset of: " + ", ".join(CONFIGS))
    ap.add_argument("--out", type=Path, default=Path("benchmarks/speed_vs_trl"))
    ap.add_argument("--baseline-src", default="", help="a tagrpo src/ directory to run each tagrpo config from as well (NAME@base)")
    ap.add_argument("--tagrpo-set", action="append", default=[],
                    help="extra key=value for the tagrpo configs of this run (e.g. micro_batch_tokens=1024), repeatable")
    ap.add_argument("--variant", action="append", default=[], metavar="LABEL:KEY=VAL,...",
                    help="also run each tagrpo config from this tree with these extra settings, as NAME+LABEL "
                         "(e.g. gc:gradient_checkpointing=true), repeatable")
    ap.add_argument("--dtype", choices=("auto", "bf16", "fp32"), default="auto",
                    help="compute dtype of every config (auto: bf16 where the CPU has bf16 units, as tagrpo's autocast auto, else fp32)")
    ap.add_argument("--child", nargs=3, metavar=("NAME", "STEPS", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]), Path(args.child[2]))
        return
    import torch
    import transformers
    import trl

    os.environ["TAGRPO_BENCH_DTYPE"] = resolve_dtype(args.dtype)
    os.environ["TAGRPO_BENCH_SETS"] = ",".join(args.tagrpo_set)
    names = [n for n in CONFIGS if not args.only or n in args.only.split(",")]
    variants = {}
    for v in args.variant:
        label, _, kv = v.partition(":")
        if not label or not kv or any("=" not in x for x in kv.split(",")):
            ap.error(f"--variant {v!r}: expected LABEL:KEY=VAL[,KEY=VAL...]")
        variants[label] = kv.split(",")
    if args.baseline_src:
        names = [x for n in names for x in ([f"{n}@base", n] if n.startswith("tagrpo") else [n])]
    names = [x for n in names for x in [n, *([f"{n}+{lb}" for lb in variants] if n.startswith("tagrpo") and "@" not in n else [])]]
    args.out.mkdir(parents=True, exist_ok=True)
    peak_before = matmul_flops()
    raw, rows_out = {}, []
    for name in names:
        f = args.out / f"raw-{name}.json"
        t0 = time.perf_counter()
        env = {**os.environ, **(TUNED_ENV if name == "trl-grpo-tuned" else {})}
        if "+" in name:
            env["TAGRPO_BENCH_SETS"] = ",".join([*args.tagrpo_set, *variants[name.split("+")[1]]])
        if name.endswith("@base"):
            env["PYTHONPATH"] = str(Path(args.baseline_src).resolve())
        subprocess.run([sys.executable, __file__, "--child", name, str(args.steps + args.warmup), str(f)], check=True, env=env)
        print(f"{name}: {time.perf_counter() - t0:.0f} s", flush=True)
        raw[name] = json.loads(f.read_text())
    peak_after = matmul_flops()
    peak = max(peak_before, peak_after)
    for name in names:
        rows_out.append(summarize(name, raw[name], args.warmup, peak))
    doc = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "date": time.strftime("%Y-%m-%d %H:%M"),
           "machine": f"{platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}, "
                      f"transformers {transformers.__version__}, trl {trl.__version__}",
           "dtype": _dtype(), "matmul_gflops": {"before": peak_before / 1e9, "after": peak_after / 1e9}, "rows": rows_out}
    (args.out / "results.json").write_text(json.dumps(doc, indent=1))
    print(markdown(doc))
    (args.out / "results.md").write_text(markdown(doc))


def markdown(doc: dict) -> str:
    cols = ["config", "completions/step", "rows trained/step", "step s", "generate s", "train s", "sampled tok/s", "generate tok/s", "train tok/s", "train GFLOP/s",
            "vs matmul", "peak RSS MB"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in doc["rows"]:
        lines.append("| " + " | ".join(("–" if r[c] != r[c] else f"{r[c]:.3g}") if isinstance(r[c], float) else str(r[c])
                                       for c in cols) + " |")
    trl_row = next((r for r in doc["rows"] if r["config"] == "trl-grpo"), None)
    if trl_row:
        lines += ["", "| config | step / TRL | generate / TRL | train / TRL | peak RSS / TRL |", "|---|---|---|---|---|"]
        for r in doc["rows"]:
            if r is trl_row:
                continue
            lines.append(f"| {r['config']} | {r['step s'] / trl_row['step s']:.2f}x | {r['generate s'] / trl_row['generate s']:.2f}x | "
                         f"{r['train s'] / trl_row['train s']:.2f}x | {r['peak RSS MB'] / trl_row['peak RSS MB']:.2f}x |")
        lines += ["", "Each row's train FLOP/s counts 6 x parameters x tokens run forward and backward (padding included) "
                  "over the train time; `rows trained/step` is below `completions/step` where tagrpo skipped "
                  "zero-advantage rows (same update, no forward/backward)."]
    by_name = {r["config"]: r for r in doc["rows"]}
    vs_base = [(r, by_name[b]) for r in doc["rows"] if "@" not in r["config"]
               for b in [r["config"].split("+")[0] + "@base"] if b in by_name]
    if vs_base:
        lines += ["", "| config | step / base | train / base | peak RSS / base |", "|---|---|---|---|"]
        lines += [f"| {r['config']} | {r['step s'] / b['step s']:.2f}x | {r['train s'] / b['train s']:.2f}x | "
                  f"{r['peak RSS MB'] / b['peak RSS MB']:.2f}x |" for r, b in vs_base]
    m = doc["matmul_gflops"]
    lines += ["", f"{doc['dtype']} 2048x2048 matmul: {m['before']:.0f} GFLOP/s before, {m['after']:.0f} after (the larger is the reference).",
              f"Command: `{doc['command']}` ({doc['date']}); {doc['machine']}."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
