"""Training data as families: rows with tokenized anchor (q0) and neighbor (q1..qN) prompts, and
which families each step (and each process) trains on.

A family is one question with its N neighbors. GRPO uses only q0; TA-GRPO samples from every
variant; the data is the same. Rows that cannot be used (no question, no answer, a prompt longer
than `max_prompt_tokens`, too few rule neighbors) are reported by row and skipped, never cut.
"""

from __future__ import annotations

import random
from functools import lru_cache

from tagrpo.errors import TagrpoError
from tagrpo.train.config import TrainConfig


def seed_for(*parts: int) -> int:
    """A 31-bit seed from integers (FNV-style hash): the same parts give the same seed anywhere."""
    h = 1469598103934665603
    for p in parts:
        h = ((h ^ (int(p) & 0xFFFFFFFFFFFF)) * 1099511628211) % (1 << 61)
    return h % (2**31 - 1)


def source_rows(cfg: TrainConfig, rows: list[dict] | None = None) -> tuple[list[dict], str]:
    """The raw rows (given, built-in arithmetic, or read from `train_data`) and a name for messages."""
    if rows is not None:
        return rows, "rows"
    if cfg.train_data == "arith":
        from tagrpo.data.arith import generate_problems

        return generate_problems(cfg.arith_size, cfg.arith_difficulty, seed=cfg.seed), "arith"
    from tagrpo.data.io import read_rows

    return read_rows(cfg.train_data, question_field=cfg.question_field or None, answer_field=cfg.answer_field or None), cfg.train_data


def rule_neighbors(rows: list[dict], n: int, index: list[int], seed: int) -> dict[int, list[str]]:
    """Validated rule-backend neighbors (offline, deterministic given the seed), by row index."""
    if not rows:
        return {}
    from tagrpo.neighbors import BuildOptions, RuleBackend, build_neighbors

    usable = [(i, r) for i, r in zip(index, rows) if isinstance(r.get("question"), str) and r.get("answer") is not None]
    built, _ = build_neighbors([{**r, "id": i} for i, r in usable], RuleBackend(seed=seed), options=BuildOptions(n=n))
    return {int(b["id"]): list(b.get("neighbors") or []) for b in built}


def generator_neighbors(rows: list[dict], n: int, seed: int, source: str) -> dict[int, list[str]]:
    """Neighbors from the arithmetic generator (N distinct training forms per row, deterministic
    per (row id, seed)), by row index; a row without the generator's structure is an error."""
    from tagrpo.data.arith_forms import row_neighbors

    out = {}
    for i, row in enumerate(rows):
        if not isinstance(row.get("question"), str) or row.get("answer") is None:
            continue  # reported and skipped below
        try:
            out[i] = [text for _, text in row_neighbors({**row, "id": row.get("id", i)}, n, seed)]
        except ValueError as e:
            raise TagrpoError(f"{source} row {i + 1} (id {row.get('id', i)!r}): neighbors: generator: {e}; "
                              "use neighbors: rules or column for other data") from None
    return out


def load_families(cfg: TrainConfig, tokenizer, rows: list[dict] | None = None) -> tuple[list[dict], list[str]]:
    """Rows with `prompts` = [anchor q0 ids, neighbor ids...]; returns (families, skipped-row messages)."""
    from tagrpo.rewards import normalize_gold
    from tagrpo.rollout import build_prompt_ids

    rows, source = source_rows(cfg, rows)
    n_needed = cfg.num_neighbors if cfg.uses_neighbors else 0
    made: dict[int, list[str]] = {}
    if n_needed and cfg.neighbors == "generator":
        made = generator_neighbors(rows, n_needed, cfg.seed, source)
    elif n_needed:
        want = [i for i, r in enumerate(rows) if cfg.neighbors == "rules" or (cfg.neighbors == "auto" and not r.get("neighbors"))]
        made = rule_neighbors([rows[i] for i in want], n_needed, want, cfg.seed)
    out, skipped = [], []
    system = cfg.system_prompt or None
    for i, row in enumerate(rows):
        where = f"{source} row {i + 1}"
        q, a = row.get("question"), row.get("answer")
        if not isinstance(q, str) or not q.strip():
            skipped.append(f"{where}: no question")
            continue
        if a is None or not normalize_gold(str(a)):
            skipped.append(f"{where}: no usable answer")
            continue
        neighbors: list[str] = []
        if n_needed:
            have = row.get("neighbors")
            if cfg.neighbors == "column" or (cfg.neighbors == "auto" and have):
                if not isinstance(have, list) or len(have) < n_needed:
                    raise TagrpoError(
                        f"{where}: num_neighbors={n_needed} but the row has {len(have) if isinstance(have, list) else 0} "
                        "neighbors; build more with `tagrpo neighbors --n ...`, lower num_neighbors, or set neighbors: rules"
                    )
                neighbors = [str(x) for x in have[:n_needed]]
            else:
                neighbors = made.get(i, [])
                if len(neighbors) < n_needed:
                    skipped.append(f"{where}: the rule backend found only {len(neighbors)} of {n_needed} neighbors")
                    continue
        prompts = [build_prompt_ids(tokenizer, x, cfg.prompt_template, system) for x in [q, *neighbors]]
        longest = max(len(p) for p in prompts)
        if longest > cfg.max_prompt_tokens:
            skipped.append(f"{where}: prompt of {longest} tokens > max_prompt_tokens={cfg.max_prompt_tokens}")
            continue
        out.append({"id": row.get("id", i), "question": q, "answer": str(a), "neighbors": neighbors, "prompts": prompts})
    if not out:
        raise TagrpoError(f"no usable training rows in {source}" + (f" (first problem: {skipped[0]})" if skipped else ""))
    return out, skipped


@lru_cache(maxsize=4)
def epoch_order(seed: int, epoch: int, n: int) -> tuple[int, ...]:
    """The data order of one epoch: a seeded permutation of range(n)."""
    perm = list(range(n))
    random.Random(seed_for(seed, 7919, epoch)).shuffle(perm)
    return tuple(perm)


def step_families(data: list[dict], step: int, per_step: int, seed: int, rank: int = 0, world: int = 1) -> list[tuple[int, dict]]:
    """(family index within the step, row) for this process: the step's families, this rank's
    contiguous share. Families are never split across processes."""
    n = len(data)
    fams = []
    for j in range(per_step):
        epoch, pos = divmod(step * per_step + j, n)
        fams.append((j, data[epoch_order(seed, epoch, n)[pos]]))
    per = per_step // world
    return fams[rank * per : (rank + 1) * per]
