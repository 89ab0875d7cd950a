"""The trainer as users run it: the CLI end to end, resume after SIGKILL, 2-process data parallel."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
ENV = dict(os.environ, PYTHONPATH=str(ROOT / "tests"), TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1")

REQUIRED_KEYS = [
    "step", "reward/mean", "reward/std", "reward/variant_0/mean", "reward/variant_0/std", "reward/variant_1/mean",
    "uniform/q0_all_correct", "uniform/q0_all_wrong", "uniform/family_all_correct", "uniform/family_all_wrong",
    "adv/nonzero_frac", "loss/policy", "loss/clipfrac", "loss/approx_kl", "loss/kl", "actor/entropy", "actor/grad_norm",
    "actor/lr", "response/length_mean", "response/length_max", "response/truncation_rate", "perf/tokens_per_s",
    "time/generate", "time/reward", "time/train", "time/step",
]
TIMING = ("time/", "perf/tokens_per_s", "perf/gen_tokens_per_s", "perf/train_tokens_per_s")


def _run(args, **kw):
    return subprocess.run(args, env=ENV, cwd=ROOT, capture_output=True, text=True, timeout=600, **kw)


def _metrics(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]


def _strip_timing(m: dict) -> dict:
    return {k: v for k, v in m.items() if not k.startswith(TIMING)}


def _rows_file(tmp_path: Path) -> Path:
    from train_helpers import ROWS

    p = tmp_path / "rows.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return p


COMMON = ["--set", "reward=tagrpo.rewards.toy:parity_reward", "--set", "neighbors=column"]


@pytest.mark.slow
def test_cli_train_tiny_end_to_end(tmp_path):
    run = tmp_path / "run"
    rows = _rows_file(tmp_path)
    r = _run([str(BIN / "tagrpo"), "train", "--config", "configs/tiny.yaml", "--set", f"output_dir={run}",
              "--set", f"train_data={rows}", *COMMON])
    assert r.returncode == 0, r.stderr[-3000:]
    ms = _metrics(run)
    assert [m["step"] for m in ms] == [1, 2]
    for key in REQUIRED_KEYS:
        assert key in ms[0], f"metrics.jsonl lacks {key}"
    assert (run / "config.yaml").exists() and list((run / "tb").iterdir())
    assert (run / "checkpoints" / "step-2" / "COMPLETE").exists()
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(run / "final")
    assert model.config.num_hidden_layers == 2


def test_cli_bad_config_is_a_clear_error(tmp_path):
    r = _run([str(BIN / "tagrpo"), "train", "--config", "configs/tiny.yaml", "--set", "algoritm=grpo"])
    assert r.returncode == 2
    assert "unknown config key 'algoritm'" in r.stderr and "algorithm" in r.stderr
    r = _run([str(BIN / "tagrpo"), "train", "--config", "configs/tiny.yaml", "--set", "agg=mean"])
    assert r.returncode == 2 and "token-mean" in r.stderr


KILL_SCRIPT = textwrap.dedent("""
    import os, signal, sys
    from tagrpo.train import trainer as T
    from tagrpo.train.config import load_config
    real_save = T.Trainer.save
    def save(self, step):
        real_save(self, step)
        if step == int(os.environ["KILL_AFTER"]):
            os.kill(os.getpid(), signal.SIGKILL)
    T.Trainer.save = save
    cfg = load_config(sys.argv[1], sys.argv[2:])
    t = T.Trainer(cfg); t.setup(); t.train()
""")


@pytest.mark.slow
def test_resume_after_sigkill_reproduces_metrics(tmp_path):
    rows = _rows_file(tmp_path)
    script = tmp_path / "kill.py"
    script.write_text(KILL_SCRIPT)
    sets = ["steps=6", "save_every=1", "keep_checkpoints=2", f"train_data={rows}", "reward=tagrpo.rewards.toy:parity_reward",
            "neighbors=column", "save_final=false", "tensorboard=false"]
    full, killed = tmp_path / "full", tmp_path / "killed"
    env = dict(ENV, KILL_AFTER="0")
    r = subprocess.run([sys.executable, str(script), "configs/tiny.yaml", f"output_dir={full}", *sets], env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    env = dict(ENV, KILL_AFTER="3")
    r = subprocess.run([sys.executable, str(script), "configs/tiny.yaml", f"output_dir={killed}", *sets], env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == -9, "the run should have been SIGKILLed after step 3"
    assert [m["step"] for m in _metrics(killed)] == [1, 2, 3]
    # a half-written checkpoint from a later kill must never be picked up
    junk = killed / "checkpoints" / "step-5"
    junk.mkdir()
    (junk / "trainer_state.json").write_text('{"step": 5}')
    (killed / "checkpoints" / ".tmp-step-4-x").mkdir()
    r = _run([str(BIN / "tagrpo"), "train", "--resume", str(killed)])
    assert r.returncode == 0, r.stderr[-3000:]
    a, b = _metrics(full), _metrics(killed)
    assert [m["step"] for m in b] == [1, 2, 3, 4, 5, 6]
    for ma, mb in zip(a[3:], b[3:]):
        sa, sb = _strip_timing(ma), _strip_timing(mb)
        assert sa.keys() == sb.keys()
        for k in sa:
            if isinstance(sa[k], float):
                assert sb[k] == pytest.approx(sa[k], rel=1e-4, abs=1e-5), k
            else:
                assert sa[k] == sb[k], k


DDP_SCRIPT = textwrap.dedent("""
    import json, sys, torch
    from accelerate import Accelerator
    from tagrpo.train.trainer import Trainer
    from tagrpo.train.config import load_config
    acc = Accelerator(cpu=True)
    assert acc.num_processes == int(sys.argv[3]), (acc.num_processes, acc.distributed_type)  # really data-parallel
    cfg = load_config(sys.argv[1], sys.argv[4:], world_size=acc.num_processes)
    t = Trainer(cfg, accelerator=acc); t.setup(); t.train()
    if acc.is_main_process:
        sd = {k: v.detach().double().sum().item() for k, v in acc.unwrap_model(t.model).state_dict().items()}
        json.dump(sd, open(sys.argv[2], "w"))
    acc.end_training()  # destroys the process group, as `tagrpo train` does
""")


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("torchrun", path=str(BIN)) is None, reason="torchrun not installed")
@pytest.mark.parametrize("shared_prefix", [False, True])
def test_two_process_data_parallel_matches_one_process(tmp_path, shared_prefix):
    # shared_prefix: one process reuses each prompt's KV cache, two run it as one block-masked
    # forward a prompt (two forwards before one backward would upset DDP): the same training
    rows = _rows_file(tmp_path)
    script = tmp_path / "ddp.py"
    script.write_text(DDP_SCRIPT)
    # one family per generate call: rollout seeds depend on (seed, step, family) only
    sets = ["steps=2", "questions_per_step=4", f"train_data={rows}", "reward=tagrpo.rewards.toy:parity_reward",
            "neighbors=column", "generate_batch_size=6", "save_final=false", "tensorboard=false", "beta=0.0",
            f"shared_prefix={str(shared_prefix).lower()}"]
    out = {}
    for nproc in (1, 2):
        run = tmp_path / f"p{nproc}"
        sd = tmp_path / f"sd{nproc}.json"
        # torchrun: `accelerate launch --cpu --num_processes 2` starts one process (its CPU
        # launcher is mpirun's); under torchrun the Accelerator is MULTI_CPU over gloo
        cmd = [str(BIN / "torchrun"), "--nproc_per_node", str(nproc), "--master_port", str(_free_port()), str(script),
               "configs/tiny.yaml", str(sd), str(nproc), f"output_dir={run}", *sets]
        r = _run(cmd)
        assert r.returncode == 0, r.stderr[-4000:]
        out[nproc] = (_metrics(run), json.loads(sd.read_text()))
    (m1, sd1), (m2, sd2) = out[1], out[2]
    if shared_prefix:  # each prompt computed once on both sides: fewer tokens than full rows
        for a, b in zip(m1, m2):
            assert a["train/computed_tokens_fwd_bwd"] < a["train/tokens"]
            assert b["train/computed_tokens_fwd_bwd"] < b["train/tokens"]
    for a, b in zip(m1, m2):
        for k in ("reward/mean", "uniform/family", "uniform/q0", "adv/nonzero_frac", "rollout/responses", "train/rows", "train/tokens"):
            assert a[k] == pytest.approx(b[k], abs=1e-6), k
        assert a["loss/policy"] == pytest.approx(b["loss/policy"], abs=1e-5)
    for k in sd1:
        assert sd2[k] == pytest.approx(sd1[k], rel=1e-4, abs=1e-4), k


CLI_UNDER_TORCHRUN = textwrap.dedent("""
    import json, os, sys, torch.distributed as dist
    from tagrpo.cli import app
    try:
        app(sys.argv[2:])
    except SystemExit as e:
        assert not e.code, e.code
    json.dump({"initialized": dist.is_initialized()}, open(f"{sys.argv[1]}.{os.environ['RANK']}.json", "w"))
""")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("torchrun", path=str(BIN)) is None, reason="torchrun not installed")
def test_train_command_under_torchrun_destroys_its_process_group(tmp_path):
    # left alive into interpreter teardown, gloo's threads can abort a finished run (SIGABRT):
    # `tagrpo train` destroys the process group before it returns, on every rank
    rows = _rows_file(tmp_path)
    script = tmp_path / "cli.py"
    script.write_text(CLI_UNDER_TORCHRUN)
    r = _run([str(BIN / "torchrun"), "--nproc_per_node", "2", "--master_port", str(_free_port()), str(script),
              str(tmp_path / "after"), "train", "--config", "configs/tiny.yaml", "--set", f"output_dir={tmp_path / 'run'}",
              "--set", "steps=1", "--set", "questions_per_step=4", "--set", f"train_data={rows}", "--set", "save_final=false",
              "--set", "tensorboard=false", *COMMON])
    assert r.returncode == 0, r.stderr[-4000:]
    after = {p.name: json.loads(p.read_text()) for p in tmp_path.glob("after.*.json")}
    assert after == {"after.0.json": {"initialized": False}, "after.1.json": {"initialized": False}}
    assert len(_metrics(tmp_path / "run")) == 1


@pytest.mark.slow
def test_ctrl_c_saves_a_checkpoint_and_exits_cleanly(tmp_path):
    import signal
    import time

    rows = _rows_file(tmp_path)
    run = tmp_path / "run"
    proc = subprocess.Popen([str(BIN / "tagrpo"), "train", "--config", "configs/tiny.yaml", "--set", f"output_dir={run}",
                             "--set", "steps=40", "--set", "save_every=0", "--set", f"train_data={rows}", *COMMON],
                            env=ENV, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while time.time() < deadline and not ((run / "metrics.jsonl").exists() and (run / "metrics.jsonl").read_text().strip()):
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    done = len(_metrics(run))
    assert 1 <= done < 40
    assert (run / "checkpoints" / f"step-{done}" / "COMPLETE").exists()
    assert "--resume" in out + err
