"""`tagrpo export verl`: write `tagrpo neighbors` output as verl's RL parquet (one row per family).

Imports nothing heavy (no torch, no verl) until it runs, so `tagrpo --help` stays instant.
"""

from __future__ import annotations

from pathlib import Path

import typer

from tagrpo._cli_util import user_errors

export_app = typer.Typer(
    name="export",
    help="Write datasets in other frameworks' layouts (verl).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@export_app.command("verl")
@user_errors
def export_verl_command(
    input: Path = typer.Option(..., "--input", help="Rows with question, answer and neighbors (`tagrpo neighbors` output; .jsonl, .json or .parquet)."),
    output: Path = typer.Option(..., "--output", help="verl parquet to write (data.train_files / data.val_files)."),
    n: int = typer.Option(..., "--n", min=0, help="Neighbors per family (N); must match tagrpo.num_neighbors of the launch. 0: plain GRPO rows."),
    template: str = typer.Option(None, "--template", help="User message with a {question} placeholder (default: tagrpo's boxed-answer instruction)."),
    system: str = typer.Option(None, "--system", help="Optional system message put before the user message."),
    data_source: str = typer.Option(None, "--data-source", help="verl data_source of every row (default: tagrpo/<input stem>)."),
    split: str = typer.Option("train", "--split", help="Written to extra_info.split."),
    question_field: str = typer.Option(None, "--question-field", help="Question field name (default: question, else problem)."),
    answer_field: str = typer.Option(None, "--answer-field", help="Answer field name (default: answer, else solution)."),
) -> None:
    """Write verl's parquet: prompt messages (verl applies the model's chat template at rollout),
    reward_model.ground_truth, and extra_info with the question and its N neighbors."""
    from tagrpo.integrations.verl.data import DEFAULT_TEMPLATE, export_verl

    rows = export_verl(
        input, output, num_neighbors=n, template=template or DEFAULT_TEMPLATE, system=system,
        data_source=data_source, split=split, question_field=question_field, answer_field=answer_field,
    )
    typer.echo(f"wrote {len(rows)} families (N={n}) to {output}")
