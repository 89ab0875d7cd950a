"""The report's HTML page: one self-contained file (figures embedded as data URIs, each linking to
its PNG beside the page), a summary table per run, eval tables, and a caption per figure that
says what to look for when comparing TA-GRPO with GRPO."""

from __future__ import annotations

import base64
import html
import math
from datetime import datetime
from pathlib import Path

from tagrpo.report.runs import Run

CAPTIONS = {
    "reward": ("Reward", ("Mean reward of the sampled responses per step (thin: raw, thick: smoothed), for all "
               "responses and per prompt variant. Variant 0 is the original question q0; variants 1..N are its "
               "rewordings, sampled by TA-GRPO but scored against the same answer.")),
    "uniform": ("Uniform-reward groups", ("Fraction of groups whose rewards are all equal, so every advantage is 0 and "
                "the group teaches nothing (GRPO's gradient vanishing). Solid: the q0 view (the G responses to q0); "
                "dashed: the family view (all (N+1)·G responses that share a joint advantage). TA-GRPO should keep "
                "the dashed line below the solid one. All-correct and all-wrong are counted apart: too easy vs too hard.")),
    "diversity": ("Diversity", ("Mean pairwise cosine distance between sentence embeddings (all-MiniLM-L6-v2) of "
                  "the responses to one question, averaged over questions. Falling diversity is the collapse "
                  "TA-GRPO is meant to slow down.")),
    "passk": ("pass@k", ("Unbiased pass@k (1 - C(n-c, k)/C(n, k), mean over questions) from the run's eval_*.json "
              "files. Gains at large k mean the model finds more distinct correct solutions, not just the same one "
              "more often.")),
    "time": ("Step time", ("Mean seconds per step split into generation, reward and training (other = logging, "
             "checkpoints). TA-GRPO samples (N+1)·G responses per question, so compare it with grpo-matched, "
             "which spends the same sampling budget on q0 alone.")),
    "health": ("Training health", ("Share of responses with a non-zero advantage (the learning signal), policy "
               "entropy, KL to the reference, response length, truncation rate and gradient norm.")),
}

CSS = """
:root { --fg:#1f2328; --muted:#59636e; --line:#d1d9e0; --bg:#ffffff; --head:#f6f8fa; --accent:#0969da; }
* { box-sizing: border-box; }
body { font: 15px/1.5 -apple-system, "Segoe UI", "Helvetica Neue", Arial, sans-serif; color: var(--fg);
       background: var(--bg); margin: 0; }
main { max-width: 1220px; margin: 0 auto; padding: 28px 32px 60px; }
h1 { font-size: 28px; margin: 0 0 4px; }
h2 { font-size: 21px; margin: 36px 0 8px; padding-bottom: 6px; border-bottom: 1px solid var(--line); }
h3 { font-size: 16px; margin: 20px 0 6px; }
p.sub { color: var(--muted); margin: 0 0 18px; }
p.caption { color: var(--muted); margin: 4px 0 10px; max-width: 980px; }
table { border-collapse: collapse; margin: 10px 0 6px; font-size: 14px; }
th, td { border: 1px solid var(--line); padding: 6px 11px; text-align: right; white-space: nowrap; }
th { background: var(--head); font-weight: 600; white-space: normal; vertical-align: bottom; }
.wrap { overflow-x: auto; max-width: 100%; }
td.l, th.l { text-align: left; }
tr:nth-child(even) td { background: #fbfcfd; }
figure { margin: 8px 0 18px; }
figure img { max-width: 100%; height: auto; border: 1px solid var(--line); border-radius: 6px; }
code { background: var(--head); padding: 1px 5px; border-radius: 4px; font-size: 13px; }
.pos { color: #1a7f37; } .neg { color: #cf222e; } .muted { color: var(--muted); }
nav a { color: var(--accent); text-decoration: none; margin-right: 14px; }
.note { color: var(--muted); font-size: 13px; }
"""


def _fmt(v, kind: str = "num") -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    if kind == "pct":
        return f"{100 * v:.1f}%"
    if kind == "int":
        return f"{int(v):,}"
    if kind == "s":
        return f"{v:.1f} s"
    return f"{v:.3f}"


def _summary_table(runs: list[Run]) -> str:
    head = ("run", "algorithm", "steps", "reward (last 10%)", "uniform q0", "uniform family", "adv ≠ 0",
            "diversity (last)", "sampled tokens", "s / step")
    rows = []
    for r in runs:
        steps = r.last("step")
        cells = [
            f'<td class="l" title="{html.escape(str(r.path))}"><b>{html.escape(r.name)}</b></td>',
            f'<td class="l">{html.escape(r.algorithm or "?")}</td>',
            f"<td>{_fmt(steps, 'int')}</td>",
            f"<td>{_fmt(r.tail_mean('reward/mean'))}</td>",
            f"<td>{_fmt(r.tail_mean('uniform/q0'), 'pct')}</td>",
            f"<td>{_fmt(r.tail_mean('uniform/family'), 'pct')}</td>",
            f"<td>{_fmt(r.tail_mean('adv/nonzero_frac'), 'pct')}</td>",
            f"<td>{_fmt(r.last('diversity/mean_pairwise_distance'))}</td>",
            f"<td>{_fmt(r.last('perf/sampled_tokens'), 'int')}</td>",
            f"<td>{_fmt(r.tail_mean('time/step', 1.0), 's')}</td>",
        ]
        rows.append("<tr>" + "".join(cells) + "</tr>")
    ths = "".join(f'<th class="{"l" if i < 2 else ""}">{html.escape(h)}</th>' for i, h in enumerate(head))
    return f"<div class=\"wrap\"><table><tr>{ths}</tr>{''.join(rows)}</table></div>"


def _eval_tables(runs: list[Run]) -> str:
    """One table per benchmark: a row per (run, eval file, model), the difference to the first row
    in brackets (percentage points), the sampling settings of each file in a note."""
    by_bench: dict[str, list[tuple[str, dict]]] = {}
    settings: list[str] = []
    for r in runs:
        for stem, doc in r.evals:
            models = doc.get("models", [])
            s = doc.get("settings") or {}
            if s:
                settings.append(f"{r.name}/{stem}: " + ", ".join(f"{k}={s[k]}" for k in ("n", "temperature", "top_p", "max_new_tokens", "seed") if k in s))
            for m in models:
                for bench, res in (m.get("benchmarks") or {}).items():
                    if res.get("pass@k"):
                        label = f"{r.label} · {stem}" + (f" · {m.get('name')}" if len(models) > 1 else "")
                        by_bench.setdefault(bench, []).append((label, res))
    parts = []
    for bench in sorted(by_bench):
        entries = by_bench[bench]
        ks = sorted({int(k) for _, res in entries for k in res["pass@k"]})
        head = ["run · eval file", "questions"] + [f"pass@{k}" for k in ks] + ["greedy", "diversity", "length", "truncated"]
        base = entries[0][1]["pass@k"]
        rows = []
        for i, (label, res) in enumerate(entries):
            pk = res["pass@k"]
            cells = [f'<td class="l">{html.escape(label)}</td>', f"<td>{_fmt(res.get('n_questions'), 'int')}</td>"]
            for k in ks:
                v, b = pk.get(str(k)), base.get(str(k))
                cell = _fmt(v, "pct")
                if i > 0 and isinstance(v, (int, float)) and isinstance(b, (int, float)):
                    d = 100 * (v - b)
                    cls = "pos" if d > 0.05 else "neg" if d < -0.05 else "muted"
                    cell += f' <span class="{cls}">({d:+.1f})</span>'
                cells.append(f"<td>{cell}</td>")
            cells += [f"<td>{_fmt(res.get('greedy_accuracy'), 'pct')}</td>", f"<td>{_fmt(res.get('diversity'))}</td>",
                      f"<td>{_fmt(res.get('mean_response_length'), 'int')}</td>", f"<td>{_fmt(res.get('truncation_rate'), 'pct')}</td>"]
            rows.append("<tr>" + "".join(cells) + "</tr>")
        ths = "".join(f'<th class="{"l" if i == 0 else ""}">{html.escape(h)}</th>' for i, h in enumerate(head))
        parts.append(f"<h3>{html.escape(bench)}</h3><div class=\"wrap\"><table><tr>{ths}</tr>{''.join(rows)}</table></div>")
    if parts:
        parts.append('<p class="note">Differences vs the first row in brackets, in percentage points. '
                     + html.escape("; ".join(settings)) + "</p>")
    return "".join(parts)


def _img(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    name = html.escape(path.name)
    return f'<a href="{name}"><img src="data:image/png;base64,{data}" alt="{name}" data-file="{name}"></a>'


def render_page(runs: list[Run], figures: dict[str, Path], title: str | None = None) -> str:
    title = title or ("tagrpo report: " + " vs ".join(r.label for r in runs))
    sections = []
    nav = []
    for name, path in figures.items():
        heading, caption = CAPTIONS.get(name, (name, ""))
        nav.append(f'<a href="#{name}">{html.escape(heading)}</a>')
        sections.append(f'<h2 id="{name}">{html.escape(heading)}</h2><p class="caption">{html.escape(caption)}</p>'
                        f"<figure>{_img(path)}</figure>")
        if name == "passk":
            sections.append(_eval_tables(runs))
    notes = ["run directories: " + ", ".join(f"{html.escape(r.name)} = <code>{html.escape(str(r.path))}</code>" for r in runs)]
    notes += [f"{html.escape(r.name)}: {r.skipped_lines} unreadable line(s) in metrics.jsonl skipped" for r in runs if r.skipped_lines]
    missing = [CAPTIONS[k][0] for k in CAPTIONS if k not in figures]
    if missing:
        notes.append("no data for: " + ", ".join(missing))
    created = datetime.now().strftime("%Y-%m-%d %H:%M")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title><style>{CSS}</style></head>
<body><main>
<h1>{html.escape(title)}</h1>
<p class="sub">Transformation-Augmented GRPO diagnostics · {len(runs)} run(s) · generated {created} by <code>tagrpo report</code></p>
<nav><a href="#summary">Summary</a>{''.join(nav)}</nav>
<h2 id="summary">Summary</h2>
{_summary_table(runs)}
<p class="note">reward / uniform / adv ≠ 0: mean over the last 10% of steps; s / step: mean over all steps.
{'<br>' + '<br>'.join(notes) if notes else ''}</p>
{''.join(sections)}
</main></body></html>
"""


def write_report(run_dirs: list, output: str | Path | None = None, title: str | None = None) -> Path:
    """Load the runs, write the PNGs and `index.html` into `output` (default: RUN_DIR/report for
    one run, ./tagrpo-report for several); returns the page's path."""
    from tagrpo.report.plots import make_figures
    from tagrpo.report.runs import load_runs

    runs = load_runs(list(run_dirs))
    out = Path(output) if output is not None else (runs[0].path / "report" if len(runs) == 1 else Path("tagrpo-report"))
    figures = make_figures(runs, out)
    page = out / "index.html"
    tmp = out / ".index.html.tmp"
    tmp.write_text(render_page(runs, figures, title), encoding="utf-8")
    tmp.replace(page)
    return page
