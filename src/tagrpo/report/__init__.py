"""Reports: PNG plots and one HTML page from one or more run directories (GRPO vs TA-GRPO
overlaid: reward per variant, uniform fractions in the q0 and family views, diversity, step time,
pass@k from eval files). Imports are light; matplotlib loads when a report is written."""

from tagrpo.report.page import render_page, write_report
from tagrpo.report.runs import Run, load_run, load_runs

__all__ = ["Run", "load_run", "load_runs", "render_page", "write_report"]
