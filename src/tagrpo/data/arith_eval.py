"""Held-out evaluation sets of built-in arithmetic problems, for telling apart what training on
q0 (GRPO) and on q0 plus rewordings (TA-GRPO) generalizes to:

- `train-form`: new problems in the training form (the default wording of q0);
- `heldout-form`: the same new problems, each stated in a held-out form (`HELDOUT_FORMS`, never
  used in training, round-robin over the rows): robustness to rewording, paired row by row with
  `train-form`;
- `harder`: new problems with more operations (`difficulty + extra_ops`) over the same number
  range, in the training form.

Use a seed that no training run uses for its problems (training rows come from `seed` = the run
seed; the default here is the demo's held-out seed), and pass the training rows as `avoid` so that
no evaluation problem repeats a training problem's arithmetic under other names. Rows are `{"id", "question", "answer",
"structure", "form"}` and load in `tagrpo eval --data FILE`.

    python -m tagrpo.data.arith_eval --out DIR [--n 64] [--difficulty 1] [--seed 10007] [--extra-ops 1] [--avoid TRAIN.jsonl]
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tagrpo.data.arith import check_structure, generate_problems
from tagrpo.data.arith_forms import HELDOUT_FORMS, render

EVAL_SETS = ("train-form", "heldout-form", "harder")
EVAL_SEED = 10_007  # tagrpo.demo.HELDOUT_SEED


def math_key(structure: dict) -> tuple:
    """The arithmetic of a problem (start and operations), whatever its names and wording."""
    return (structure["start"], tuple((op["op"], op["k"]) for op in structure["ops"]))


def _problems(n: int, difficulty: int, seed: int, id_prefix: str, num_ops: int | None, avoid: set) -> list[dict]:
    """The first n generated problems whose arithmetic is not in `avoid` (rows are generated as a
    stream, so asking for more rows never changes the earlier ones)."""
    m = n
    while True:
        rows = [r for r in generate_problems(m, difficulty, seed, id_prefix, num_ops) if math_key(r["structure"]) not in avoid]
        if len(rows) >= n:
            return rows[:n]
        if m > 64 * (n + len(avoid)) + 1024:
            raise ValueError(f"cannot find {n} problems outside the {len(avoid)} to avoid at difficulty {difficulty}")
        m *= 2


def eval_set(kind: str, n: int, difficulty: int = 1, seed: int = EVAL_SEED, extra_ops: int = 1,
             avoid: Iterable[dict] = ()) -> list[dict]:
    """One evaluation set (see the module docstring); deterministic given the arguments. `avoid`:
    rows with a `structure` (the training set) whose arithmetic the set must not repeat."""
    if kind not in EVAL_SETS:
        raise ValueError(f"unknown evaluation set {kind!r}; choose one of {', '.join(EVAL_SETS)}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    keys = {math_key(check_structure(r["structure"])) for r in avoid}
    if kind == "harder":
        if extra_ops < 1:
            raise ValueError(f"extra_ops must be >= 1, got {extra_ops}")
        rows = _problems(n, difficulty, seed, "eval-harder", difficulty + extra_ops, keys)
        return [{**r, "form": "default"} for r in rows]
    rows = _problems(n, difficulty, seed, f"eval-{kind}", None, keys)
    if kind == "train-form":
        return [{**r, "form": "default"} for r in rows]
    out = []
    for i, r in enumerate(rows):
        form = HELDOUT_FORMS[i % len(HELDOUT_FORMS)]
        out.append({**r, "question": render(r["structure"], form), "form": form})
    return out


def eval_sets(n: int, difficulty: int = 1, seed: int = EVAL_SEED, extra_ops: int = 1,
              avoid: Iterable[dict] = ()) -> dict[str, list[dict]]:
    avoid = list(avoid)
    return {kind: eval_set(kind, n, difficulty, seed, extra_ops, avoid) for kind in EVAL_SETS}


def write_eval_sets(out_dir: str | Path, n: int, difficulty: int = 1, seed: int = EVAL_SEED, extra_ops: int = 1,
                    avoid: Iterable[dict] = ()) -> dict[str, Path]:
    """Write OUT_DIR/arith-<set>.jsonl for every set; returns {set: path}."""
    from tagrpo.data.io import write_rows

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for kind, rows in eval_sets(n, difficulty, seed, extra_ops, avoid).items():
        paths[kind] = out / f"arith-{kind}.jsonl"
        write_rows(paths[kind], rows)
    return paths


def main(argv: list[str] | None = None) -> None:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m tagrpo.data.arith_eval", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="output directory (arith-<set>.jsonl per set)")
    ap.add_argument("--n", type=int, default=64, help="problems per set")
    ap.add_argument("--difficulty", type=int, default=1, help="difficulty 1..5 of the training problems")
    ap.add_argument("--seed", type=int, default=EVAL_SEED, help="a seed no training run uses")
    ap.add_argument("--extra-ops", type=int, default=1, help="harder set: this many more operations")
    ap.add_argument("--avoid", default=None, help="a training rows file (.jsonl/.parquet with `structure`) whose problems to leave out")
    args = ap.parse_args(argv)
    try:
        avoid = []
        if args.avoid:
            from tagrpo.data.io import read_rows

            avoid = [r for r in read_rows(args.avoid) if r.get("structure")]
        paths = write_eval_sets(args.out, args.n, args.difficulty, args.seed, args.extra_ops, avoid)
    except ValueError as e:
        ap.error(str(e))
    for kind, path in paths.items():
        print(f"{kind}: {path}")


if __name__ == "__main__":
    main()
