"""The `generator` neighbor backend of `tagrpo neighbors`: rows of the built-in arithmetic
generator restated in N distinct training forms (`tagrpo.data.arith_forms`).

Unlike the rules and model backends it does not rewrite text: it renders the problem's structure
(kept in the row's `structure` field) in other surface forms, so every neighbor has the answer of
q0 by construction, and no validation, store or request is needed. Deterministic per (row id,
seed). Rows without the structure are an error naming the row: use another backend for them.
"""

from __future__ import annotations

from tagrpo.errors import TagrpoError
from tagrpo.neighbors.builder import BuildReport


def generator_forms(transformations: tuple[str, ...] | None) -> tuple[str, ...]:
    """The neighbor forms to draw from: all of them, or a subset named by --transformations."""
    from tagrpo.data.arith_forms import NEIGHBOR_FORMS

    if not transformations:
        return NEIGHBOR_FORMS
    unknown = [t for t in transformations if t not in NEIGHBOR_FORMS]
    if unknown:
        raise TagrpoError(f"--transformations {','.join(unknown)}: not a form of the generator backend; "
                          f"choose from {', '.join(NEIGHBOR_FORMS)}")
    return tuple(dict.fromkeys(transformations))


def build_generator_neighbors(rows: list[dict], n: int, seed: int = 0, transformations: tuple[str, ...] | None = None,
                              source: str = "input") -> tuple[list[dict], BuildReport]:
    """Rows plus `neighbors` (N texts) and `neighbor_forms` (their form names), and a report."""
    from tagrpo.data.arith_forms import NEIGHBOR_FORMS, row_neighbors

    forms = generator_forms(transformations)
    if n > len(forms):
        raise TagrpoError(f"--n {n}: the generator backend has {len(forms)} forms to draw from ({', '.join(forms)}); "
                          f"use --n {len(forms)} or fewer")
    # forms left out by --transformations are excluded like the row's own form
    excluded = tuple(f for f in NEIGHBOR_FORMS if f not in forms)
    out = []
    for i, row in enumerate(rows):
        try:
            made = row_neighbors({**row, "form": row.get("form") or "default"}, n, seed, excluded)
        except ValueError as e:
            raise TagrpoError(f"{source}, row {i + 1} (id {row.get('id')!r}): --backend generator: {e}; "
                              "use --backend rules, openai or hf for other data") from None
        out.append({**row, "neighbors": [text for _, text in made], "neighbor_forms": [form for form, _ in made]})
    report = BuildReport(rows=len(rows), n=n, neighbors=sum(len(r["neighbors"]) for r in out), new=0)
    report.rows_complete = sum(len(r["neighbors"]) == n for r in out)
    report.short_rows = [(r.get("id"), len(r["neighbors"])) for r in out if len(r["neighbors"]) < n]
    return out, report
