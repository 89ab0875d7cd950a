"""The report's figures (matplotlib, Agg, no pyplot state): reward per variant index, uniform
fractions in the q0 view vs the family view, diversity, the step time split, training health,
and pass@k curves from eval files. Several runs overlay their curves, one colour per run.

The figures are built around what distinguishes TA-GRPO from GRPO: with a joint (family)
advantage a group only loses its gradient when every variant is uniform, so the family-view
uniform fraction (dashed) should sit below the q0 view (solid); GRPO runs have one view only.

Here: the figure functions, `FIGURES` and `make_figures`; the style, colours, figure sizing,
lines, legend and saving they share are in `plot_style.py`.
"""

from __future__ import annotations

import math
from pathlib import Path

from tagrpo.report.plot_style import (  # noqa: F401 - STYLE, PAGE_WIDTH_IN, smooth re-exported
    PAGE_WIDTH_IN,
    STYLE,
    _colors,
    _figure,
    _legend,
    _line,
    _mean,
    _save,
    smooth,
)
from tagrpo.report.runs import Run

PHASES = (("time/generate", "generate"), ("time/reward", "reward"), ("time/train", "train"))
HEALTH = (
    ("adv/nonzero_frac", "responses with a non-zero advantage", None),
    ("actor/entropy", "policy entropy (nats/token)", None),
    ("loss/kl", "KL to the reference (k3)", None),
    ("response/length_mean", "mean response length (tokens)", None),
    ("response/truncation_rate", "truncated responses", (0, 1)),
    ("actor/grad_norm", "gradient norm (before clipping)", None),
    ("train/logp_on_policy", "log-prob/token, on-policy rows", None),
    ("train/logp_anchored", "log-prob/token, anchored rows (under q0)", None),
)


def reward_figure(runs: list[Run], path: Path) -> Path | None:
    """Reward over steps: all responses, then one panel per variant index (0 = original q0)."""
    variants = sorted({v for r in runs for v in r.variants()})
    panels = [("reward/mean", "all responses")] + [
        (f"reward/variant_{v}/mean", "variant 0 (original question q0)" if v == 0 else f"variant {v} (neighbor q{v})") for v in variants
    ]
    if not any(r.series(k)[0] for r in runs for k, _ in panels):
        return None
    ncols = min(3, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = _figure(ncols, nrows, width=3.6 if ncols == 3 else 5.4)
    colors = _colors(len(runs))
    for ax, (key, title) in zip(axes, panels):
        for run, c in zip(runs, colors):
            xs, ys = run.series(key)
            _line(ax, xs, ys, c, run.label)
        ax.set_title(title)
        ax.set_xlabel("training step")
        ax.set_ylabel("mean reward")
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    ys_all = [y for r in runs for k, _ in panels for y in r.series(k)[1]]
    if ys_all and min(ys_all) >= 0 and max(ys_all) <= 1:
        for ax in axes[: len(panels)]:
            ax.set_ylim(-0.03, 1.03)
    fig.suptitle("Reward over training, per prompt variant", fontsize=14, fontweight="bold")
    _legend(fig, axes[0], runs)
    return _save(fig, path)


def uniform_figure(runs: list[Run], path: Path) -> Path | None:
    """Fractions of uniform groups: any / all-correct / all-wrong; solid q0 view, dashed family view."""
    panels = (("", "uniform groups (zero advantage)"), ("_all_correct", "all correct"), ("_all_wrong", "all wrong"))
    if not any(r.series(f"uniform/q0{s}")[0] or r.series(f"uniform/family{s}")[0] for r in runs for s, _ in panels):
        return None
    from matplotlib.lines import Line2D

    fig, axes = _figure(3, height=3.2)
    colors = _colors(len(runs))
    for ax, (suffix, title) in zip(axes, panels):
        for run, c in zip(runs, colors):
            xs, ys = run.series(f"uniform/q0{suffix}")
            _line(ax, xs, ys, c, run.label, "-")
            fx, fy = run.series(f"uniform/family{suffix}")
            if fy and (run.algorithm.startswith("ta-grpo") or fy != ys):
                _line(ax, fx, fy, c, None, "--")
        ax.set_title(title)
        ax.set_xlabel("training step")
        ax.set_ylabel("fraction of groups")
        ax.set_ylim(-0.03, 1.03)
    views = ([Line2D([], [], color="0.3", linestyle="-", linewidth=2), Line2D([], [], color="0.3", linestyle="--", linewidth=2)],
             ["q0 view (G responses to q0)", "family view ((N+1)·G responses)"])
    fig.suptitle("Uniform-reward groups over training: q0 view vs family view", fontsize=14, fontweight="bold")
    _legend(fig, axes[0], runs, views)
    return _save(fig, path)


def diversity_figure(runs: list[Run], path: Path) -> Path | None:
    if not any(r.series("diversity/mean_pairwise_distance")[0] for r in runs):
        return None
    fig, axes = _figure(1, width=PAGE_WIDTH_IN, height=3.4)
    ax = axes[0]
    for run, c in zip(runs, _colors(len(runs))):
        xs, ys = run.series("diversity/mean_pairwise_distance")
        _line(ax, xs, ys, c, run.label, marker="o")
    ax.set_title("Response diversity over training")
    ax.set_xlabel("training step")
    ax.set_ylabel("mean pairwise cosine distance")
    _legend(fig, ax, runs)
    return _save(fig, path)


def time_figure(runs: list[Run], path: Path) -> Path | None:
    """Left: mean seconds per step split into generate / reward / train / other, per run.
    Right: seconds per step over training."""
    if not any(r.series("time/step")[0] or r.series("time/generate")[0] for r in runs):
        return None
    fig, axes = _figure(2, width=PAGE_WIDTH_IN / 2, height=max(2.8, 1.2 + 0.5 * len(runs)))
    ax = axes[0]
    phase_colors = ["#4C72B0", "#DD8452", "#55A868", "#BBBBBB"]
    labels = [r.label for r in runs]
    lefts = [0.0] * len(runs)
    for (key, name), pc in zip(list(PHASES) + [("other", "other")], phase_colors):
        vals = []
        for i, r in enumerate(runs):
            if key == "other":
                total = _mean(r.series("time/step")[1])
                parts = sum(_mean(r.series(k)[1]) or 0.0 for k, _ in PHASES)
                vals.append(max(0.0, (total or parts) - parts))
            else:
                vals.append(_mean(r.series(key)[1]) or 0.0)
        ax.barh(labels, vals, left=lefts, color=pc, label=name, height=0.55)
        lefts = [a + b for a, b in zip(lefts, vals)]
    for i, total in enumerate(lefts):
        ax.text(total, i, f" {total:.1f} s", va="center", fontsize=9.5)
    ax.invert_yaxis()
    ax.set_xlim(0, max(lefts) * 1.18 if max(lefts) > 0 else 1)
    ax.set_title("Mean time per step, by phase")
    ax.set_xlabel("seconds")
    ax.grid(axis="y", visible=False)
    phases = ax.get_legend_handles_labels()
    ax2 = axes[1]
    for run, c in zip(runs, _colors(len(runs))):
        xs, ys = run.series("time/step")
        _line(ax2, xs, ys, c, run.label)
    ax2.set_title("Seconds per training step")
    ax2.set_xlabel("training step")
    ax2.set_ylabel("seconds")
    ax2.set_ylim(bottom=0)
    fig.suptitle("Where the time goes", fontsize=14, fontweight="bold")
    runs_h = ax2.get_legend_handles_labels()
    fig.legend(phases[0] + runs_h[0], ["phase: " + x for x in phases[1]] + runs_h[1],
               loc="outside lower center", ncols=min(6, len(phases[1]) + len(runs_h[1])), fontsize=9.5)
    return _save(fig, path)


def health_figure(runs: list[Run], path: Path) -> Path | None:
    panels = [(k, t, lim) for k, t, lim in HEALTH if any(r.series(k)[0] for r in runs)]
    if not panels:
        return None
    ncols = min(3, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = _figure(ncols, nrows, height=2.7)
    colors = _colors(len(runs))
    for ax, (key, title, lim) in zip(axes, panels):
        for run, c in zip(runs, colors):
            xs, ys = run.series(key)
            _line(ax, xs, ys, c, run.label)
        ax.set_title(title, fontsize=11)
        ax.set_xlabel("training step")
        if lim:
            ax.set_ylim(lim[0] - 0.03, lim[1] + 0.03)
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    fig.suptitle("Training health", fontsize=14, fontweight="bold")
    _legend(fig, axes[0], runs)
    return _save(fig, path)


def passk_figure(runs: list[Run], path: Path) -> Path | None:
    """pass@k against k (log2 axis) per benchmark, one line per (run, eval file, model)."""
    curves: dict[str, list[tuple[str, int, list[int], list[float]]]] = {}
    for ri, run in enumerate(runs):
        for stem, doc in run.evals:
            models = doc.get("models", [])
            for mi, m in enumerate(models):
                for bench, res in (m.get("benchmarks") or {}).items():
                    pk = res.get("pass@k") or {}
                    pts = sorted((int(k), float(v)) for k, v in pk.items() if isinstance(v, (int, float)))
                    if not pts:
                        continue
                    label = f"{run.label} · {stem.removeprefix('eval_')}" + (f" · {m.get('name')}" if len(models) > 1 else "")
                    curves.setdefault(bench, []).append((label, ri, [p[0] for p in pts], [100 * p[1] for p in pts]))
    if not curves:
        return None
    benches = sorted(curves)
    ncols = min(3, len(benches))
    nrows = math.ceil(len(benches) / ncols)
    fig, axes = _figure(ncols, nrows, width=3.6 if ncols == 3 else 5.4, height=3.4)
    colors = _colors(len(runs))
    styles = ["-", "--", ":", "-."]
    markers = ["o", "s", "^", "D", "v"]
    for ax, bench in zip(axes, benches):
        seen: dict[int, int] = {}
        for label, ri, ks, vals in curves[bench]:
            j = seen.get(ri, 0)
            seen[ri] = j + 1
            ax.plot(ks, vals, color=colors[ri], linestyle=styles[j % 4], marker=markers[j % 5], linewidth=2, markersize=5, label=label)
        allk = sorted({k for _, _, ks, _ in curves[bench] for k in ks})
        ax.set_xscale("log", base=2)
        ax.set_xticks(allk, [str(k) for k in allk])
        ax.minorticks_off()
        ax.set_title(bench)
        ax.set_xlabel("k (samples)")
        ax.set_ylabel("pass@k (%)")
        top = max(v for _, _, _, vals in curves[bench] for v in vals)
        ax.set_ylim(0, min(100.0, max(5.0, top * 1.12)))  # percentages: never below 0, never above 100
    for ax in axes[len(benches):]:
        ax.set_visible(False)
    fig.suptitle("pass@k by benchmark", fontsize=14, fontweight="bold")
    legend: dict[str, object] = {}
    for ax in axes[: len(benches)]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(lab, h)
    fig.legend(list(legend.values()), list(legend), loc="outside lower center", ncols=2, fontsize=9.5)
    return _save(fig, path)


FIGURES = (
    ("reward", reward_figure),
    ("uniform", uniform_figure),
    ("diversity", diversity_figure),
    ("passk", passk_figure),
    ("time", time_figure),
    ("health", health_figure),
)


def make_figures(runs: list[Run], out_dir: Path) -> dict[str, Path]:
    """Write every figure that has data to `out_dir/<name>.png`; returns name -> path."""
    import matplotlib

    out_dir.mkdir(parents=True, exist_ok=True)
    written = {}
    with matplotlib.rc_context(STYLE):
        for name, fn in FIGURES:
            p = fn(runs, out_dir / f"{name}.png")
            if p is not None:
                written[name] = p
    return written
