"""`tagrpo demo`: the main job on the embedded default, offline on CPU.

TA-GRPO on SmolLM2-135M-Instruct with built-in arithmetic word problems and rule neighbors:
a before/after pass@k on held-out generated problems around a few training steps, with a
progress bar showing reward and uniform-reward fractions. Sized for a few minutes on 2 cores.
"""

from __future__ import annotations

import time
from importlib import resources
from pathlib import Path

HELDOUT_SEED = 10_007  # held-out problems: a seed the training set never uses
HELDOUT_QUESTIONS = 24
HELDOUT_SAMPLES = 4
HELDOUT_KS = (1, 2, 4)


def preset_path(name: str) -> Path:
    """Path of a YAML preset shipped in the package (`tagrpo/configs/<name>.yaml`)."""
    p = Path(str(resources.files("tagrpo") / "configs" / f"{name}.yaml"))
    if not p.is_file():
        raise FileNotFoundError(f"no preset {name!r}; presets: {', '.join(sorted(q.stem for q in p.parent.glob('*.yaml')))}")
    return p


def run_demo(output_dir: Path = Path("runs/demo"), steps: int | None = None, overrides: list[str] | tuple[str, ...] = (),
             heldout_questions: int = HELDOUT_QUESTIONS, heldout_samples: int = HELDOUT_SAMPLES) -> dict:
    from rich.console import Console
    from rich.table import Table

    from tagrpo.data.arith import generate_problems
    from tagrpo._cli_util import progress_printer
    from tagrpo.train.config import load_config
    from tagrpo.train.loop import Trainer

    console = Console()
    overrides = [f"output_dir={output_dir}"] + ([f"steps={steps}"] if steps else []) + list(overrides)
    cfg = load_config(preset_path("demo"), overrides)
    console.print(
        f"[bold]tagrpo demo[/bold]: TA-GRPO (N={cfg.num_neighbors} rule neighbors, G={cfg.samples_per_variant}) on the embedded "
        f"SmolLM2-135M-Instruct, {cfg.steps} steps x {cfg.questions_per_step} arithmetic questions, then pass@k on "
        f"{heldout_questions} held-out problems before/after.\n"
        "Offline, CPU only; it takes about 2 minutes on 2 cores of a CPU with bf16 matmul units, about 5 on an AVX2-only one "
        "(the first run also converts the model, ~40 s). Run directory: " + str(output_dir)
    )
    t_start = time.perf_counter()
    trainer = Trainer(cfg, console=console)
    trainer.setup()
    heldout = generate_problems(heldout_questions, cfg.arith_difficulty, seed=HELDOUT_SEED, id_prefix="heldout")
    policy = trainer.acc.unwrap_model(trainer.model)
    from tagrpo.eval.runner import evaluate, make_document, write_document
    from tagrpo.rollout import SamplingParams

    sampling = SamplingParams(temperature=cfg.temperature, top_p=1.0, max_new_tokens=cfg.max_new_tokens, seed=HELDOUT_SEED)
    ev = dict(n=heldout_samples, ks=[k for k in HELDOUT_KS if k <= heldout_samples], sampling=sampling, template=cfg.prompt_template,
              batch_size=64, diversity=True, label="arith-heldout")
    ks = [k for k in HELDOUT_KS if k <= heldout_samples]
    settings = {"n": heldout_samples, "k": ks, "temperature": cfg.temperature,
                "max_new_tokens": cfg.max_new_tokens, "seed": HELDOUT_SEED, "questions": heldout_questions}
    console.print("evaluating the base model on the held-out problems ...")
    before = evaluate(policy, trainer.tokenizer, heldout, **ev)
    trainer.release_free_memory()  # the evaluation's KV cache is free heap now: off the resident size
    prog, make = progress_printer(console, cfg.steps)
    with prog:
        task = prog.add_task("", total=cfg.steps)
        last = trainer.train(progress=make(task, 0))
    trainer.learner.release_grads()  # the last update's gradients: not needed to evaluate
    trainer.release_free_memory()
    console.print("evaluating the trained model on the same problems and seeds ...")
    after = evaluate(policy, trainer.tokenizer, heldout, **ev)
    out = Path(cfg.output_dir)
    write_document(out / "eval_before.json", make_document([{"name": "base", "path": cfg.model, "benchmarks": {"arith-heldout": before}}], settings))
    write_document(out / "eval_after.json", make_document([{"name": "ta-grpo", "path": str(out / "final"), "benchmarks": {"arith-heldout": after}}], settings))

    table = Table(title=f"held-out arithmetic (difficulty {cfg.arith_difficulty}), {heldout_questions} questions x {heldout_samples} samples, T={cfg.temperature}")
    for col in ("metric", "base", f"after {cfg.steps} TA-GRPO steps", "change"):
        table.add_column(col, justify="right")
    for k in ks:
        b, a = before["pass@k"][str(k)], after["pass@k"][str(k)]
        table.add_row(f"pass@{k}", f"{b:.3f}", f"{a:.3f}", f"{a - b:+.3f}")
    for key, name in (("mean_response_length", "response tokens"), ("truncation_rate", "truncated"), ("diversity", "diversity")):
        b, a = before.get(key), after.get(key)
        if isinstance(b, (int, float)) and isinstance(a, (int, float)):
            table.add_row(name, f"{b:.3f}", f"{a:.3f}", f"{a - b:+.3f}")
    console.print(table)
    m = last or {}
    if m:
        console.print(f"last step: reward {m['reward/mean']:.2f}, uniform q0 {m['uniform/q0']:.2f}, uniform family "
                      f"{m['uniform/family']:.2f}, {m['time/step']:.0f} s/step")
    console.print(f"done in {time.perf_counter() - t_start:.0f} s. Run directory: {out}  (metrics.jsonl, final/, eval_*.json)")
    console.print(f"Plots and an HTML page: tagrpo report {out}\n"
                  f"Note: {heldout_questions} questions x {heldout_samples} samples is a small sample (a few points of pass@k "
                  "is noise); the uniform-reward fractions (q0 view vs family view) in metrics.jsonl show the mechanism.")
    return {"before": before, "after": after, "last": m}
