"""What every benchmark result records about where it ran: the CPU model (`lscpu`'s "Model name",
as the results and closing notes name machines) and the commit of the checkout."""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path


def cpu_name() -> str:
    """`lscpu`'s model name ("AMD EPYC", "Intel(R) Xeon(R) ..."), else platform's processor."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        return next(line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def commit(cwd: Path | None = None) -> str:
    """The checkout's short commit hash, with "+dirty" when tracked files are modified."""
    cwd = cwd or Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=cwd,
                              check=False).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True,
                               cwd=cwd, check=False).stdout.strip()
    except OSError:
        return "?"
    return (head or "?") + ("+dirty" if dirty else "")
