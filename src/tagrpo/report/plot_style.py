"""Shared drawing helpers for the report's figures (matplotlib, Agg, no pyplot state).

The rc `STYLE` the figures are drawn under, one colour per run (`_colors`), a constrained-layout
figure sized to the page (`_figure`, `PAGE_WIDTH_IN`), a raw-plus-smoothed line (`_line`,
`smooth`), a shared legend below the panels (`_legend`), `_mean`, and `_save`. The figures
themselves are in `plots.py`, which re-exports `STYLE`, `PAGE_WIDTH_IN` and `smooth`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

STYLE = {
    "figure.dpi": 100,
    "savefig.dpi": 110,
    "font.size": 10.5,
    "axes.titlesize": 12,
    "axes.titleweight": "bold",
    "axes.labelsize": 10.5,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "legend.fontsize": 9.5,
    "legend.frameon": False,
}


def _colors(n: int) -> list:
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    return [cmap(i % 10) for i in range(n)]


PAGE_WIDTH_IN = 10.8  # at savefig.dpi 110 this is the page's content width, so text shows at 1:1


def _figure(ncols: int, nrows: int = 1, width: float = 3.6, height: float = 3.0):
    """A constrained-layout Figure of ncols x nrows panels, `width` inches per panel (capped to
    the page width), plus room for a suptitle and a legend below."""
    from matplotlib.figure import Figure

    fig = Figure(
        figsize=(min(PAGE_WIDTH_IN, width * ncols), height * nrows + 0.9), layout="constrained"
    )
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, [ax for row in axes for ax in row]


def smooth(ys: Sequence[float]) -> list[float]:
    """Exponential moving average with a span of ~1/10 of the points (identity under 15 points)."""
    if len(ys) < 15:
        return list(ys)
    alpha = 2.0 / (max(3, len(ys) // 10) + 1)
    out, acc = [], ys[0]
    for y in ys:
        acc = alpha * y + (1 - alpha) * acc
        out.append(acc)
    return out


def _line(ax, xs, ys, color, label=None, linestyle="-", marker=None):
    """Raw values faint, smoothed on top (when there are enough points)."""
    if not xs:
        return
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(
        MaxNLocator(integer=True)
    )  # steps are integers, also for 3-step runs
    sm = smooth(ys)
    if sm != list(ys):
        ax.plot(xs, ys, color=color, alpha=0.22, linewidth=1, linestyle=linestyle)
    ax.plot(
        xs,
        sm,
        color=color,
        linewidth=2,
        linestyle=linestyle,
        label=label,
        marker=marker if len(xs) <= 30 else None,
        markersize=4,
    )


def _save(fig, path: Path) -> Path:
    fig.savefig(path, facecolor="white")
    return path


def _legend(fig, ax, runs, extra=None):
    handles, labels = ax.get_legend_handles_labels()
    if extra:
        handles += extra[0]
        labels += extra[1]
    if handles:
        fig.legend(
            handles, labels, loc="outside lower center", ncols=min(4, len(labels)), fontsize=10
        )


def _mean(ys: Sequence[float]) -> float | None:
    return sum(ys) / len(ys) if ys else None
