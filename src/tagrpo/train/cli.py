"""`tagrpo train` and `tagrpo demo`."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from tagrpo._cli_util import progress_printer, user_errors
from tagrpo.errors import TagrpoError


@user_errors
def train_command(
    config: Optional[Path] = typer.Option(None, "--config", help="YAML config file (see configs/)."),
    set_: list[str] = typer.Option([], "--set", help="Override a config field: key=value (repeatable)."),
    resume: Optional[Path] = typer.Option(None, "--resume", help="Continue RUN_DIR from its last complete checkpoint."),
    help_config: bool = typer.Option(False, "--help-config", help="List every config field with its default and meaning."),
) -> None:
    from tagrpo.train.config import describe_fields, load_config

    if help_config:
        typer.echo(describe_fields())
        return
    if config is None and resume is None:
        raise TagrpoError("give --config FILE (see configs/) or --resume RUN_DIR")
    import os

    from rich.console import Console

    from tagrpo.train.loop import Trainer, make_accelerator

    world = int(os.environ.get("WORLD_SIZE", "1"))  # set by accelerate launch / torchrun
    if resume is not None:
        cfg_path = config or (resume / "config.yaml")
        cfg = load_config(cfg_path, list(set_) + [f"output_dir={resume}"], world_size=world)
    else:
        cfg = load_config(config, set_, world_size=world)
    acc = make_accelerator(cfg)

    console = Console()
    trainer = Trainer(cfg, resume=resume is not None, accelerator=acc, console=console)
    trainer.setup()
    if acc.is_main_process:
        console.print(f"[bold]tagrpo train[/bold]: {cfg.algorithm}, N={cfg.num_neighbors}, G={cfg.samples_per_variant}, "
                      f"{cfg.questions_per_step} questions/step, {cfg.steps} steps, model {cfg.model} -> {cfg.output_dir}"
                      + (f" (resuming at step {trainer.start_step})" if trainer.start_step else ""))
    prog, make = progress_printer(console, cfg.steps)
    if acc.is_main_process:
        with prog:
            task = prog.add_task("", total=cfg.steps, completed=trainer.start_step)
            trainer.train(progress=make(task, trainer.start_step))
        console.print(f"run directory: {cfg.output_dir}")
    else:
        trainer.train()
    # destroy the process group while the interpreter is whole: left to interpreter teardown,
    # gloo's worker threads can abort the process (SIGABRT, "terminate called without an active
    # exception") after a run that finished (pytorch/pytorch#179291)
    acc.end_training()


@user_errors
def demo_command(
    steps: int = typer.Option(0, "--steps", help="Override the demo's number of training steps (0 = preset)."),
    output_dir: Path = typer.Option(Path("runs/demo"), "--output-dir", help="Run directory."),
) -> None:
    """TA-GRPO on the embedded SmolLM2-135M-Instruct with built-in arithmetic problems, then a
    before/after pass@k table on held-out problems."""
    from tagrpo.demo import run_demo

    run_demo(output_dir=output_dir, steps=steps or None)
