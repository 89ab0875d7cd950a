"""The Evidence 2 tables of benchmarks/RESULTS.md, from summarize.py's summary.json.

    python benchmarks/evidence2/summarize.py --out benchmarks/evidence2/results/study --dest DIR
    python benchmarks/evidence2/brief.py DIR/summary.json > DIR/brief.md
    python benchmarks/evidence2/brief.py DIR/summary.json --into benchmarks/RESULTS.md   # in place

`--into FILE` replaces what lies between the lines `<!-- brief.py:...-->` and `<!-- /brief.py -->`
in FILE (the marker lines stay) and leaves the rest of the file as it was. `--block NAME` picks the
block marked `<!-- brief.py NAME:...-->` ... `<!-- /brief.py NAME -->` instead, so that one file can
hold the tables of several studies (RESULTS.md: the first study and regime 2).

Three tables, each value per seed so that the spread between seeds shows: held-out pass@1 /
pass@16 per arm and set; the late-training regime and budget per arm; the key paired differences
(arm 4 against 1, 2, 3, 5, 6) on pass@1 and pass@16 with their 95% intervals and verdicts
(the full list, every k and training metric, is in summary.md).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

ARMS = {1: "grpo", 2: "grpo-2.5x", 3: "grpo-matched", 4: "ta-grpo (generator)", 5: "ta-grpo-separate", 6: "ta-grpo (rules)"}
SETS = ("train-form", "heldout-form", "harder")
KEY_METRICS = ("train-form pass@1", "train-form pass@16", "heldout-form pass@1", "heldout-form pass@16")


def by_arm(summary: dict) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    for run in summary["runs"].values():
        out.setdefault(int(run["arm"]), []).append(run)
    return {a: sorted(rs, key=lambda r: r["seed"]) for a, rs in sorted(out.items())}


def cell(values: list[float | None], fmt: str = "{:.2f}") -> str:
    """Mean (per-seed values) of the finite values; '–' when none."""
    vs = [v for v in values if v is not None]
    if not vs:
        return "–"
    each = " / ".join(fmt.format(v) for v in vs)
    return fmt.format(statistics.fmean(vs)) + (f" ({each})" if len(vs) > 1 else "")


def passk_table(summary: dict) -> list[str]:
    head = ["arm", "seeds"] + [f"{s} p@{k}" for s in SETS for k in (1, 16)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    base = summary.get("base") or {}
    if base:
        lines.append("| base model | – | " + " | ".join(f"{base[s]['pass@k'][str(k)]:.2f}" if s in base else "–"
                                                      for s in SETS for k in (1, 16)) + " |")
    for arm, runs in by_arm(summary).items():
        evals = [r.get("eval") for r in runs]
        seeds = ",".join(str(r["seed"]) for r, e in zip(runs, evals) if e)
        vals = [cell([e[s]["pass@k"][str(k)] if e and s in e else None for e in evals]) for s in SETS for k in (1, 16)]
        lines.append(f"| {arm} {ARMS.get(arm, '')} | {seeds} | " + " | ".join(vals) + " |")
    return lines


def train_table(summary: dict) -> list[str]:
    cols = [("q0 all-correct", "late_q0_all_correct", "{:.2f}"), ("q0 all-wrong", "late_q0_all_wrong", "{:.2f}"),
            ("family uniform", "late_family_uniform", "{:.2f}"), ("diversity", "late_diversity", "{:.2f}"),
            ("anchor gap (nats/token)", None, "{:.1f}"), ("grad norm", "late_grad_norm", "{:.1f}"),
            ("sampled tokens (k)", "sampled_tokens", "{:.0f}"), ("train min", "train_s", "{:.0f}")]
    head = ["arm", "seeds"] + [c[0] for c in cols]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    scale = {"sampled_tokens": 1e-3, "train_s": 1 / 60}
    for arm, runs in by_arm(summary).items():
        trains = [r["train"] for r in runs if r.get("train")]
        vals = []
        for _, key, fmt in cols:
            if key is None:  # on-policy minus anchored log-prob per token (logged from session 14 on)
                xs = [t["late_logp_on_policy"] - t["late_logp_anchored"] if t.get("late_logp_anchored") is not None
                      and t.get("late_logp_on_policy") is not None else None for t in trains]
            else:
                xs = [t[key] * scale.get(key, 1) if t.get(key) is not None else None for t in trains]
            vals.append(cell(xs, fmt))
        lines.append(f"| {arm} {ARMS.get(arm, '')} | {','.join(str(r['seed']) for r in runs if r.get('train'))} | "
                     + " | ".join(vals) + " |")
    return lines


def diff_table(summary: dict) -> list[str]:
    head = ["difference", "metric", "seeds", "mean", "bootstrap 95%", "paired t 95%", "verdict"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    iv = lambda x: f"[{x[0]:+.2f}, {x[1]:+.2f}]" if x and None not in x else "–"
    for d in summary["differences"]:
        if d["metric"] in KEY_METRICS:
            lines.append(f"| {d['pair']} | {d['metric']} | {d['seeds']} | {d['mean']:+.3f} | {iv(d.get('boot'))} | "
                         f"{iv(d.get('t'))} | {d['verdict']} |")
    return lines


def markers(name: str | None = None) -> tuple[str, str]:
    """The opening line's prefix and the closing line of the block called `name` (None: the unnamed one)."""
    return (f"<!-- brief.py {name}:", f"<!-- /brief.py {name} -->") if name else ("<!-- brief.py:", "<!-- /brief.py -->")


def replace_block(text: str, block: str, where: str = "the file", name: str | None = None) -> str:
    """`text` with the lines between the block's opening and closing marker lines replaced by `block`."""
    opening, closing = markers(name)
    lines = text.split("\n")
    opens = [i for i, ln in enumerate(lines) if ln.startswith(opening)]
    closes = [i for i, ln in enumerate(lines) if ln.strip() == closing]
    if len(opens) != 1 or len(closes) != 1 or closes[0] < opens[0]:
        raise SystemExit(f"{where}: needs exactly one '{opening} ... -->' line followed by one '{closing}' line "
                         f"(found {len(opens)} and {len(closes)})")
    return "\n".join([*lines[: opens[0] + 1], block, *lines[closes[0]:]])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("summary", type=Path, help="summary.json written by summarize.py")
    ap.add_argument("--into", type=Path, help="a Markdown file whose marked block to replace (see above)")
    ap.add_argument("--block", metavar="NAME", help="with --into: the block marked '<!-- brief.py NAME: ... -->'")
    args = ap.parse_args(argv)
    s = json.loads(args.summary.read_text())
    out = ["Held-out pass@1 / pass@16 (40 questions a set, n = 16; mean, then each seed):", "", *passk_table(s), "",
           "Late training (last half of the steps; mean, then each seed) and budget:", "", *train_table(s), "",
           "Key differences (paired by seed, pass@k also by question):", "", *diff_table(s)]
    if args.into is None:
        print("\n".join(out))
        return
    new = replace_block(args.into.read_text(), "\n".join(out), str(args.into), args.block)
    tmp = args.into.with_name(args.into.name + ".tmp")
    tmp.write_text(new)
    tmp.replace(args.into)


if __name__ == "__main__":
    main()
