"""Atomic checkpoints: `checkpoints/step-N/` is written under a temporary name, completed with a
`COMPLETE` marker, then renamed; a half-written checkpoint is never loaded. The last K are kept."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

from tagrpo._fs import atomic_directory

MARKER = "COMPLETE"


def _rng_state() -> dict:
    import numpy as np
    import torch

    return {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}


def _set_rng_state(state: dict) -> None:
    import numpy as np
    import torch

    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])


def save_checkpoint(run_dir: Path, step: int, model, tokenizer, optimizer, scheduler, extra: dict, keep: int) -> Path:
    import torch

    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step}"
    with atomic_directory(final) as tmp:
        model.save_pretrained(tmp / "model", safe_serialization=True)
        tokenizer.save_pretrained(tmp / "model")
        torch.save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(), "rng": _rng_state()}, tmp / "state.pt")
        (tmp / "trainer_state.json").write_text(json.dumps({"step": step, **extra}, indent=2))
        (tmp / MARKER).write_text("ok\n")
    for old in list_checkpoints(run_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Complete checkpoints, oldest first."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    out = []
    for p in root.glob("step-*"):
        try:
            n = int(p.name.split("-", 1)[1])
        except ValueError:
            continue
        if (p / MARKER).is_file() and (p / "trainer_state.json").is_file():
            out.append((n, p))
    return [p for _, p in sorted(out)]


def latest_checkpoint(run_dir: Path) -> Path | None:
    ckpts = list_checkpoints(run_dir)
    return ckpts[-1] if ckpts else None


def load_training_state(ckpt: Path, optimizer, scheduler) -> dict:
    import torch

    state = torch.load(ckpt / "state.pt", weights_only=False, map_location="cpu")  # resumable on another device
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    _set_rng_state(state["rng"])
    return json.loads((ckpt / "trainer_state.json").read_text())
