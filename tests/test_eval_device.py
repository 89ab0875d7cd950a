"""`tagrpo eval --device`: auto / cpu / cuda, resolved before anything is loaded; `cuda` without
a GPU and unknown values are refused naming the option and the choices (exit 2); `--device cpu`
runs end to end on a tiny random model; `evaluate(device=...)` moves the model, None leaves it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tagrpo.errors import TagrpoError
from tagrpo.eval.runner import DEVICES, evaluate, resolve_device

FIX = Path(__file__).resolve().parent / "fixtures" / "benchmarks"


def _invoke(args: list[str]):
    from typer.testing import CliRunner

    from tagrpo.cli import app

    return CliRunner().invoke(app, ["eval", *args])


@pytest.fixture
def no_cuda(monkeypatch):
    """Behave as on a machine without a GPU, also when the tests run on one."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_resolve_device(no_cuda, monkeypatch):
    import torch

    assert DEVICES == ("auto", "cpu", "cuda")
    assert resolve_device("auto") == "cpu" and resolve_device("cpu") == "cpu"
    with pytest.raises(TagrpoError, match=r"--device cuda: torch sees no CUDA device; choose one of auto, cpu, cuda"):
        resolve_device("cuda")
    with pytest.raises(TagrpoError, match=r"--device 'gpu' is not valid; choose one of auto, cpu, cuda"):
        resolve_device("gpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == "cuda" and resolve_device("cuda") == "cuda"


def test_cli_device_cuda_without_gpu_is_refused(no_cuda, tmp_path):
    # refused before the (missing) model or data is touched
    res = _invoke(["--model", str(tmp_path / "no-model"), "--data", str(tmp_path / "no-data.jsonl"), "--device", "cuda"])
    assert res.exit_code == 2, res.output
    assert "--device cuda" in res.output and "no CUDA device" in res.output
    assert "auto, cpu, cuda" in res.output
    assert "Traceback" not in res.output


def test_cli_device_bogus_is_refused(tmp_path):
    res = _invoke(["--model", str(tmp_path / "no-model"), "--data", str(tmp_path / "no-data.jsonl"), "--device", "bogus"])
    assert res.exit_code == 2, res.output
    assert "--device 'bogus' is not valid" in res.output and "auto, cpu, cuda" in res.output


def test_cli_device_cpu_end_to_end(tmp_path):
    from tagrpo.models import save_tiny_model

    model = save_tiny_model(tmp_path / "tiny", seed=0)
    out = tmp_path / "eval.json"
    res = _invoke(["--model", model, "--data", str(FIX / "five_questions.jsonl"), "--device", "cpu", "--n", "2", "--k", "1,2",
                   "--max-new-tokens", "4", "--limit", "3", "--output", str(out), "--quiet", "--no-diversity"])
    assert res.exit_code == 0, res.output
    assert "pass@2" in res.output
    doc = json.loads(out.read_text())
    assert doc["settings"]["device"] == "cpu"
    r = doc["models"][0]["benchmarks"]["five_questions"]
    assert r["n_questions"] == 3 and r["n_samples"] == 2 and set(r["pass@k"]) == {"1", "2"}
    assert all(0 < s["tokens"] <= 4 for q in r["questions"] for s in q["samples"])


def test_evaluate_device_argument(no_cuda):
    import torch

    from tagrpo.models import make_tiny_model
    from tagrpo.rollout import SamplingParams

    model, tok = make_tiny_model(seed=0)
    rows = [{"id": 0, "question": "What is 2 + 3?", "answer": "5"}]
    params = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=3, seed=0)
    kw = {"diversity": False, "batch_size": 4}
    moved = []
    orig_to = model.to

    def spy_to(*args, **kwargs):
        moved.append(args[0] if args else kwargs.get("device"))
        return orig_to(*args, **kwargs)

    model.to = spy_to
    a = evaluate(model, tok, rows, 2, [1, 2], params, **kw)  # device=None: the model stays where it is
    assert moved == []
    b = evaluate(model, tok, rows, 2, [1, 2], params, device="auto", **kw)  # auto -> cpu here
    assert moved == ["cpu"] and next(model.parameters()).device == torch.device("cpu")
    assert [s["text"] for s in a["questions"][0]["samples"]] == [s["text"] for s in b["questions"][0]["samples"]]
    with pytest.raises(TagrpoError, match=r"device cuda: torch sees no CUDA device"):
        evaluate(model, tok, rows, 2, [1, 2], params, device="cuda", **kw)
    with pytest.raises(TagrpoError, match=r"device 'tpu' is not valid; choose one of auto, cpu, cuda"):
        evaluate(model, tok, rows, 2, [1, 2], params, device="tpu", **kw)
