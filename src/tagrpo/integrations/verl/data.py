"""`tagrpo neighbors` output -> verl's RL parquet layout, one row per family (no verl import).

verl's `RLHFDataset` (0.9.1, `verl/utils/dataset/rl_dataset.py`) reads, per row:

    data_source      str    the reward function gets it (here "tagrpo/<input file stem>")
    prompt           list   chat messages [{"role": "user", "content": ...}]; verl's agent loop
                            applies the *model's* chat template to them at rollout time, so the
                            parquet holds no template text and no special tokens
    ability          str    "math"
    reward_model     dict   {"style": "rule", "ground_truth": <gold answer>}
    extra_info       dict   {"index": i, "id", "question", "neighbors": [q1..qN], "split"}

How this differs from a plain verl GRPO parquet: `extra_info` carries q0's bare question text and
its N neighbors. The user message is `template.format(question=q0)` (default: tagrpo's
"...put your final answer within \\boxed{}" template, with an optional system message); the agent
loop makes neighbor n's prompt by replacing q0's text inside that message with q_n, so the
template and system prompt are the same for every variant. The ground truth is the short gold
answer (`normalize_gold`: GSM8K's `#### 72` -> `72`, a MATH solution -> its last \\boxed{}).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tagrpo.errors import TagrpoError

DEFAULT_TEMPLATE = "{question}\nPlease reason step by step, and put your final answer within \\boxed{{}}."


def verl_rows(
    rows: list[dict],
    *,
    num_neighbors: int,
    template: str = DEFAULT_TEMPLATE,
    system: str | None = None,
    data_source: str = "tagrpo",
    split: str = "train",
    where: str = "input",
) -> list[dict]:
    """verl RL rows (one per family) from tagrpo rows `{"id", "question", "answer", "neighbors"}`.

    The first `num_neighbors` neighbors of each row are kept; a row with fewer raises TagrpoError
    naming the row (`num_neighbors=0` writes plain GRPO rows with an empty neighbor list).
    """
    from tagrpo.rewards import normalize_gold

    if num_neighbors < 0:
        raise TagrpoError(f"num_neighbors must be >= 0, got {num_neighbors}")
    if "{question}" not in template:
        raise TagrpoError(f"the prompt template must contain '{{question}}', got {template!r}")
    out = []
    for i, row in enumerate(rows):
        neighbors = list(row.get("neighbors") or [])
        if len(neighbors) < num_neighbors:
            raise TagrpoError(
                f"{where}: row {i} (id {row.get('id')!r}) has {len(neighbors)} neighbor(s) in field "
                f"'neighbors', fewer than --n {num_neighbors}. Make more with `tagrpo neighbors --n "
                f"{num_neighbors}` or lower --n."
            )
        question = row["question"]
        messages = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": template.format(question=question)}
        ]
        out.append({
            "data_source": data_source,
            "prompt": messages,
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": normalize_gold(str(row["answer"]))},
            "extra_info": {
                "index": i,
                "id": str(row.get("id", i)),
                "question": question,
                "neighbors": neighbors[:num_neighbors],
                "split": split,
            },
        })
    return out


def write_verl_parquet(path: str | os.PathLike, rows: list[dict]) -> None:
    """Write verl rows to a parquet file (atomically: a temporary file, then a rename)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    p = Path(path)
    if p.suffix != ".parquet":
        raise TagrpoError(f"{p}: verl reads parquet; give an output path ending in .parquet")
    if not rows:
        raise TagrpoError(f"{p}: no rows to write")
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp")
    pq.write_table(pa.Table.from_pylist(rows), tmp)
    os.replace(tmp, p)


def export_verl(
    input: str | os.PathLike,
    output: str | os.PathLike,
    *,
    num_neighbors: int,
    template: str = DEFAULT_TEMPLATE,
    system: str | None = None,
    data_source: str | None = None,
    split: str = "train",
    question_field: str | None = None,
    answer_field: str | None = None,
) -> list[dict]:
    """Read tagrpo rows (.jsonl/.json/.parquet, GSM8K/MATH field names understood), write verl's
    parquet to `output`, return the rows written."""
    from tagrpo.data.io import read_rows

    rows = read_rows(input, question_field, answer_field)
    out = verl_rows(
        rows,
        num_neighbors=num_neighbors,
        template=template,
        system=system,
        data_source=data_source or f"tagrpo/{Path(input).stem}",
        split=split,
        where=str(input),
    )
    write_verl_parquet(output, out)
    return out


def read_verl_parquet(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The rows of a verl parquet as Python dicts (for checks and tests)."""
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()
