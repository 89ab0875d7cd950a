"""The `tagrpo` command: one entry point, a subcommand per stage of the pipeline.

Each subcommand lives beside the code it drives (`tagrpo/<stage>/cli.py`) and imports torch and
transformers only when it runs, so `tagrpo --help` is instant.
"""

from __future__ import annotations

import typer

from tagrpo.eval.cli import eval_command
from tagrpo.integrations.verl.cli import export_app
from tagrpo.neighbors.cli import neighbors_command
from tagrpo.report.cli import report_command
from tagrpo.train.cli import demo_command, train_command

app = typer.Typer(
    name="tagrpo",
    help="Transformation-Augmented GRPO: build neighbors, train (GRPO / TA-GRPO), evaluate pass@k, report.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("neighbors", help="Rewrite each question into N problem-equivalent neighbors.")(neighbors_command)
app.command("train", help="Train with GRPO, matched GRPO, TA-GRPO or an ablation from a YAML config.")(train_command)
app.command("eval", help="Evaluate pass@k of one or more models on a file or a benchmark.")(eval_command)
app.command("report", help="Write PNG plots and an HTML page for one or more run directories.")(report_command)
app.command("demo", help="The main job on the embedded default model (CPU, offline).")(demo_command)
app.add_typer(export_app, name="export", help="Write a dataset in another framework's layout (verl).")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
