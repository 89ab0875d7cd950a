"""TA-GRPO on verl (`tagrpo.integrations.verl`) with real verl 0.9.1 objects, on CPU.

Runs in the verl environment (`make test-verl`, .venv-verl): verl pins transformers<5.11. In an
environment without verl the module is skipped, unless TAGRPO_REQUIRE_VERL=1 (set by the
Makefile), which turns a missing verl into a failure.

What is real here: verl's Hydra config (`ppo_trainer` + tagrpo's yaml), verl's `AgentLoopWorker`
(tokenization, padding, position ids, batching: the v0 worker path), verl's v0
`AgentLoopManager` dispatch (through `TAGRPOAgentLoopManager`), `DataProto`,
`core_algos.compute_grpo_outcome_advantage`, and a tiny random Llama. What is fake: the
generation server (returns fixed token ids per prompt, records the prompts it was sent) and Ray.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import numpy as np
import pytest

if os.environ.get("TAGRPO_REQUIRE_VERL") == "1":
    import verl  # noqa: F401  (a missing verl must fail, not skip, under `make test`)
else:
    pytest.importorskip("verl")

import torch
from omegaconf import OmegaConf

from tagrpo.integrations.verl._deps import TAGRPOVerlError
from tagrpo.integrations.verl.settings import (
    SESSION_KEY,
    V0_MANAGER,
    check_config,
    register_resolvers,
)

Q0 = "What is 12 plus 7?"
NEIGHBORS = ["Compute 7 + 12.", "Find the sum of twelve and seven."]
TEMPLATE = "{q}\nPlease reason step by step, and put your final answer within \\boxed{{}}."
RESPONSES = {  # response text of the fake server, by the variant whose prompt it was sent
    0: "12 + 7 = 19. The answer is \\boxed{19}.",
    1: "7 + 12 is 19, so \\boxed{19}.",
    2: "Twelve and seven: \\boxed{18}.",
}


# ------------------------------------------------------------------------------------------
# fixtures: a tiny model on disk, the composed config, verl's AgentLoopWorker, a fake server
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from tagrpo.models.tiny import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("tiny"))


def compose(*overrides: str, resolve: bool = True):
    """The config `python -m tagrpo.integrations.verl` composes, with `overrides`."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    import tagrpo.integrations.verl as tv

    register_resolvers()
    config_dir = os.path.join(os.path.dirname(tv.__file__), "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        cfg = hydra_compose("tagrpo_trainer", overrides=list(overrides))
    if resolve:
        OmegaConf.resolve(cfg)
    return cfg


def small_config(model_dir: str, *overrides: str):
    return compose(
        f"actor_rollout_ref.model.path={model_dir}",
        "actor_rollout_ref.rollout.name=vllm",
        "tagrpo.num_neighbors=2",
        "tagrpo.samples_per_variant=2",
        "data.max_prompt_length=160",
        "data.max_response_length=48",
        *overrides,
    )


class FakeServer:
    """Stands in for verl's LLMServerClient: answers by the variant it recognizes in the prompt
    text, records every prompt, returns sampler log-probs only when asked (as vLLM does)."""

    def __init__(self, tokenizer):
        self.tok = tokenizer
        self.prompts: list[list[int]] = []

    def variant_of(self, text: str) -> int:
        for v, q in enumerate([Q0, *NEIGHBORS]):
            if q in text:
                return v
        raise AssertionError(f"unknown prompt {text!r}")

    async def generate(self, *, request_id, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        self.prompts.append(list(prompt_ids))
        text = self.tok.decode(prompt_ids)
        ids = self.tok(RESPONSES[self.variant_of(text)], add_special_tokens=False)["input_ids"]
        ids = ids + [self.tok.eos_token_id]
        logprobs = [-0.5] * len(ids) if sampling_params.get("logprobs") else None
        return TokenOutput(token_ids=ids, log_probs=logprobs)


def make_worker(cfg):
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    worker = AgentLoopWorker(cfg, llm_client=None)
    worker.llm_client = FakeServer(worker.tokenizer)
    return worker


def family_batch(n_rows: int, copies: int, neighbors=NEIGHBORS):
    """A v0-trainer generation batch: `n_rows` dataset rows, each repeated `copies` times
    (interleaved, as `RayPPOTrainer.fit` does), with a uid per row."""
    from verl import DataProto

    def obj(values):
        arr = np.empty(len(values), dtype=object)
        arr[:] = values
        return arr

    msgs = [{"role": "user", "content": TEMPLATE.format(q=Q0)}]
    batch = DataProto.from_single_dict({"dummy_tensor": torch.zeros(n_rows, 1, dtype=torch.uint8)})
    batch.non_tensor_batch = {
        "raw_prompt": obj([msgs] * n_rows),
        "extra_info": obj([{"index": i, "question": Q0, "neighbors": list(neighbors)} for i in range(n_rows)]),
        "index": np.arange(n_rows),
        "uid": obj([f"uid{i}" for i in range(n_rows)]),
        "data_source": obj(["test"] * n_rows),
        "reward_model": obj([{"ground_truth": "19"}] * n_rows),
    }
    return batch.repeat(repeat_times=copies, interleave=True)


def chat_ids(tok, question_text: str) -> list[int]:
    text = tok.apply_chat_template(
        [{"role": "user", "content": TEMPLATE.format(q=question_text)}], add_generation_prompt=True, tokenize=False
    )
    return tok(text, add_special_tokens=False)["input_ids"]


def valid(row_ids: torch.Tensor, mask: torch.Tensor) -> list[int]:
    return row_ids[mask.bool()].tolist()


def run_worker(worker, batch):
    return asyncio.run(worker.generate_sequences(batch))


# ------------------------------------------------------------------------------------------
# config and refusals
# ------------------------------------------------------------------------------------------


def test_composed_config_sets_family_rollout_and_anchoring_defaults():
    cfg = compose()
    r = cfg.actor_rollout_ref.rollout
    assert (cfg.tagrpo.num_neighbors, cfg.tagrpo.samples_per_variant) == (3, 8)
    assert r.n == 32  # (N+1)*G
    assert r.calculate_log_probs is False
    assert r.agent.default_agent_loop == "tagrpo_agent"
    assert os.path.isfile(r.agent.agent_loop_config_path)
    assert cfg.algorithm.adv_estimator == "grpo"
    assert cfg.reward.custom_reward_function.path == "pkg://tagrpo.integrations.verl.reward"
    assert compose("tagrpo.num_neighbors=2", "tagrpo.samples_per_variant=4").actor_rollout_ref.rollout.n == 12
    assert compose("tagrpo.algorithm=grpo", "tagrpo.samples_per_variant=4").actor_rollout_ref.rollout.n == 4
    assert compose("tagrpo.algorithm=grpo-matched").actor_rollout_ref.rollout.n == 32
    ta = check_config(cfg)
    assert (ta.family_size, ta.anchored) == (32, True)


REFUSALS = [
    (["actor_rollout_ref.rollout.n=16"], "actor_rollout_ref.rollout.n=32"),
    (["actor_rollout_ref.rollout.calculate_log_probs=true"], "calculate_log_probs=false"),
    (["algorithm.rollout_correction.bypass_mode=true"], "bypass_mode=false"),
    (["algorithm.rollout_correction.rollout_is=token"], "rollout_is=null"),
    (["algorithm.rollout_correction.rollout_rs=token"], "rollout_rs=null"),
    (["actor_rollout_ref.rollout.multi_turn.enable=true"], "multi_turn.enable=false"),
    (["actor_rollout_ref.rollout.enable_rollout_routing_replay=true"], "routing_replay=false"),
    (["algorithm.adv_estimator=rloo"], "adv_estimator=grpo"),
    (["actor_rollout_ref.rollout.agent.default_agent_loop=single_turn_agent"], "default_agent_loop=tagrpo_agent"),
    (["actor_rollout_ref.rollout.agent.agent_loop_config_path=null"], "agent_loop_config_path"),
    (["tagrpo.algorithm=ta-grpo-separate", "actor_rollout_ref.rollout.n=8"], "actor_rollout_ref.rollout.n=32"),
    (["tagrpo.algorithm=ta-grpo-separate", "actor_rollout_ref.rollout.calculate_log_probs=true"],
     "calculate_log_probs=false"),
    (["tagrpo.algorithm=ppo"], "grpo, grpo-matched, ta-grpo, ta-grpo-unanchored, ta-grpo-separate"),
    (["tagrpo.algorithm=ta-grpo", "tagrpo.num_neighbors=0"], "tagrpo.algorithm=grpo"),
    (["trainer.use_v1=false"], "TAGRPOAgentLoopManager"),
    (["actor_rollout_ref.rollout.val_kwargs.n=9"], "val_kwargs.n <= tagrpo.samples_per_variant=8"),
]


@pytest.mark.parametrize("overrides,says", REFUSALS, ids=[" ".join(o[0]) for o in REFUSALS])
def test_check_config_refuses_with_what_to_set(overrides, says):
    cfg = compose(*overrides)
    with pytest.raises(TAGRPOVerlError) as err:
        check_config(cfg)
    assert says in str(err.value)


def test_check_config_allows_what_only_anchoring_forbids():
    # sampler log-probs and rollout correction are fine when every row is generated from the
    # prompt it is trained on (grpo-matched: q0; unanchored: q_n)
    for algorithm in ("grpo-matched", "ta-grpo-unanchored"):
        cfg = compose(f"tagrpo.algorithm={algorithm}", "actor_rollout_ref.rollout.calculate_log_probs=true",
                      "algorithm.rollout_correction.rollout_is=token")
        assert check_config(cfg).algorithm == algorithm
    v0 = compose("trainer.use_v1=false", "actor_rollout_ref.rollout.agent.agent_loop_manager_class="
                 "tagrpo.integrations.verl.agent_loop.TAGRPOAgentLoopManager")
    assert check_config(v0).family_size == 32
    # the separate ablation: (N+1)*G under one uid, anchored, on both trainers
    manager = "actor_rollout_ref.rollout.agent.agent_loop_manager_class=" + V0_MANAGER
    for extra in ([], ["trainer.use_v1=false", manager]):
        sep = check_config(compose("tagrpo.algorithm=ta-grpo-separate", *extra))
        assert (sep.family_size, sep.anchored, sep.per_variant_advantage) == (32, True, True)


def test_check_config_reads_neighbors_of_the_training_parquet(tmp_path):
    from tagrpo.integrations.verl.data import verl_rows, write_verl_parquet

    rows = [{"id": 0, "question": Q0, "answer": "19", "neighbors": NEIGHBORS}]
    path = tmp_path / "train.parquet"
    write_verl_parquet(path, verl_rows(rows, num_neighbors=2))
    ok = compose(f"data.train_files={path}", "tagrpo.num_neighbors=2")
    assert check_config(ok).num_neighbors == 2
    with pytest.raises(TAGRPOVerlError, match="fewer than tagrpo.num_neighbors=3"):
        check_config(compose(f"data.train_files={path}"))


def _run_module(*args: str, cwd) -> subprocess.CompletedProcess:
    # cwd: a run (not --cfg/--help) makes Hydra write its outputs/ folder there
    return subprocess.run([sys.executable, "-m", "tagrpo.integrations.verl", *args], check=False,
                          capture_output=True, text=True, timeout=300, cwd=cwd)


def test_entry_point_prints_composed_config_and_refuses_before_verl_starts(tmp_path):
    out = _run_module("--cfg", "job", "--resolve", "tagrpo.samples_per_variant=4", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "'n': 16" in out.stdout and "calculate_log_probs: false" in out.stdout
    assert "default_agent_loop: tagrpo_agent" in out.stdout and "algorithm: ta-grpo" in out.stdout
    helped = _run_module("--help", cwd=tmp_path)
    assert helped.returncode == 0 and "tagrpo_family_size" in helped.stdout
    bad = _run_module("actor_rollout_ref.rollout.calculate_log_probs=true", cwd=tmp_path)
    assert bad.returncode == 2
    assert "calculate_log_probs=false" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.parametrize("script,n", [("qwen3_1.7b_math.sh", 32), ("smoke.sh", 4)])
def test_example_launch_scripts_compose_and_pass_the_checks(repo_root, tmp_path, script, n):
    """Every override of the GPU launch scripts is a real verl key (Hydra refuses unknown ones)
    and the composed config passes tagrpo's checks (the scripts themselves need GPUs)."""
    done = subprocess.run(["bash", str(repo_root / "examples" / "verl" / script), "--cfg", "job", "--resolve"], check=False,
                          capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "PYTHON": sys.executable})
    assert done.returncode == 0, done.stderr
    cfg = OmegaConf.create(done.stdout)
    assert cfg.actor_rollout_ref.rollout.n == n
    assert check_config(cfg, check_data=False).family_size == n


# ------------------------------------------------------------------------------------------
# the agent loop inside verl's AgentLoopWorker (v0 path), with the fake server
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ["ta-grpo", "ta-grpo-separate"])
def test_agent_loop_samples_from_neighbors_and_reports_q0_prompt(model_dir, algorithm):
    # +tagrpo.hooked_trainer: what tagrpo's task runner sets (the separate loop demands it)
    worker = make_worker(small_config(model_dir, f"tagrpo.algorithm={algorithm}", "+tagrpo.hooked_trainer=true"))
    tok = worker.tokenizer
    batch = family_batch(n_rows=1, copies=6)
    batch.non_tensor_batch[SESSION_KEY] = np.arange(6)  # what TAGRPOAgentLoopManager adds
    out = run_worker(worker, batch)

    # session s was generated from q_{s // G}
    sent = [worker.llm_client.variant_of(tok.decode(p)) for p in worker.llm_client.prompts]
    assert sorted(sent) == [0, 0, 1, 1, 2, 2]
    assert sorted(map(tuple, worker.llm_client.prompts)) == sorted(
        tuple(chat_ids(tok, q)) for q in [Q0, Q0, *[n for n in NEIGHBORS for _ in range(2)]]
    )
    assert list(out.non_tensor_batch["ta_variant"]) == [0, 0, 1, 1, 2, 2]

    # every row: prompts = q0 (left-padded), input_ids = q0 + that row's own response
    q0 = chat_ids(tok, Q0)
    b = out.batch
    P = b["prompts"].shape[1]
    for i, variant in enumerate([0, 0, 1, 1, 2, 2]):
        response = tok(RESPONSES[variant], add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        assert valid(b["prompts"][i], b["attention_mask"][i, :P]) == q0
        assert valid(b["input_ids"][i], b["attention_mask"][i]) == q0 + response
        assert b["responses"][i, : len(response)].tolist() == response
        assert int(b["response_mask"][i].sum()) == len(response)
        # verl's positions count from the first real token of q0
        pos = b["position_ids"][i][b["attention_mask"][i].bool()]
        assert pos.tolist() == list(range(len(q0) + len(response)))
    assert "rollout_log_probs" not in b


def test_separate_agent_loop_refuses_a_trainer_tagrpo_did_not_build(model_dir):
    """Launched with verl's own main_ppo (no `tagrpo.hooked_trainer`), verl's grpo estimator
    would normalize over the family: the separate loop stops the run instead."""
    worker = make_worker(small_config(model_dir, "tagrpo.algorithm=ta-grpo-separate"))
    batch = family_batch(n_rows=1, copies=6)
    batch.non_tensor_batch[SESSION_KEY] = np.arange(6)
    # verl builds agent loops with hydra.utils.instantiate, which wraps the loop's error
    from hydra.errors import InstantiationException

    with pytest.raises(InstantiationException, match="python -m tagrpo.integrations.verl"):
        run_worker(worker, batch)
    assert worker.llm_client.prompts == []  # nothing generated


def test_unanchored_reports_neighbor_prompt_and_grpo_matched_never_reads_neighbors(model_dir):
    tok = None
    worker = make_worker(small_config(model_dir, "tagrpo.algorithm=ta-grpo-unanchored"))
    tok = worker.tokenizer
    batch = family_batch(n_rows=1, copies=6)
    batch.non_tensor_batch[SESSION_KEY] = np.arange(6)
    b = run_worker(worker, batch).batch
    P = b["prompts"].shape[1]
    for i, q in enumerate([Q0, Q0, NEIGHBORS[0], NEIGHBORS[0], NEIGHBORS[1], NEIGHBORS[1]]):
        assert valid(b["prompts"][i], b["attention_mask"][i, :P]) == chat_ids(tok, q)

    matched = make_worker(small_config(model_dir, "tagrpo.algorithm=grpo-matched"))
    batch = family_batch(n_rows=1, copies=6, neighbors=[])  # no neighbors needed
    batch.non_tensor_batch[SESSION_KEY] = np.arange(6)
    b = run_worker(matched, batch).batch
    assert all(p == chat_ids(tok, Q0) for p in matched.llm_client.prompts)
    assert len(matched.llm_client.prompts) == 6


def test_v0_manager_numbers_sessions_per_uid_across_worker_chunks(model_dir):
    """TAGRPOAgentLoopManager.generate_sequences -> verl's AgentLoopManager dispatch (chunks to
    two workers, concat, timing) -> AgentLoopWorker -> TAGRPOAgentLoop. Numbering per chunk
    instead of per batch would give the second worker sessions 0.. again."""
    from tagrpo.integrations.verl.agent_loop import TAGRPOAgentLoopManager

    cfg = small_config(model_dir)
    workers = [make_worker(cfg), make_worker(cfg)]

    class Remote:  # ray's `actor.method.remote(...)` -> an awaitable
        def __init__(self, worker):
            self.generate_sequences = type("M", (), {"remote": staticmethod(worker.generate_sequences)})

    manager = TAGRPOAgentLoopManager.__new__(TAGRPOAgentLoopManager)
    manager.agent_loop_workers = [Remote(w) for w in workers]
    batch = family_batch(n_rows=2, copies=6)  # 12 rows: worker 0 gets row 0's family, 1 row 1's
    out = manager.generate_sequences(batch)
    assert list(out.non_tensor_batch[SESSION_KEY]) == [0, 1, 2, 3, 4, 5] * 2
    assert list(out.non_tensor_batch["ta_variant"]) == [0, 0, 1, 1, 2, 2] * 2
    assert list(out.non_tensor_batch["uid"]) == ["uid0"] * 6 + ["uid1"] * 6
    sent = [workers[1].llm_client.variant_of(workers[1].tokenizer.decode(p)) for p in workers[1].llm_client.prompts]
    assert sorted(sent) == [0, 0, 1, 1, 2, 2]

    # score with tagrpo's verl reward function, then the uniform diagnostics on verl's batch
    from tagrpo.integrations.verl.metrics import uniform_metrics_from_batch
    from tagrpo.integrations.verl.reward import compute_score

    tok = workers[0].tokenizer
    texts = tok.batch_decode(out.batch["responses"], skip_special_tokens=True)
    scores = torch.tensor([compute_score("test", t, "19") for t in texts])  # (B,)
    assert scores.tolist() == [1.0, 1.0, 1.0, 1.0, 0.0, 0.0] * 2  # neighbor 2's answer is 18
    out.batch["token_level_scores"] = torch.zeros(out.batch["responses"].shape)
    out.batch["token_level_scores"][:, 0] = scores
    m = uniform_metrics_from_batch(out)
    assert m["uniform/q0_all_correct"] == 1.0 and m["uniform/family_uniform"] == 0.0
    assert m["rewards/neighbors_mean"] == 0.5

    val = family_batch(n_rows=2, copies=2)
    val.meta_info["validate"] = True
    out = manager.generate_sequences(val)
    assert list(out.non_tensor_batch["ta_variant"]) == [0, 0, 0, 0]


def test_agent_loop_v1_session_id_and_refusals(model_dir):
    """verl's v1 worker passes `session_id` to `run`; no session at all, too few neighbors, a
    multimodal processor and non-text content are refused with a message."""
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, _agent_loop_registry

    cfg = small_config(model_dir)
    worker = make_worker(cfg)
    events = asyncio.new_event_loop()  # the agent loop keeps the loop current at construction
    asyncio.set_event_loop(events)
    try:
        loop = __import__("hydra").utils.instantiate(
            _agent_loop_registry["tagrpo_agent"], trainer_config=DictConfigWrap(cfg), server_manager=worker.llm_client,
            tokenizer=worker.tokenizer, processor=None, dataset_cls=worker.dataset_cls,
            data_config=DictConfigWrap(cfg.data), hf_model_type="llama",
        )
        msgs = [{"role": "user", "content": TEMPLATE.format(q=Q0)}]
        info = {"index": 0, "question": Q0, "neighbors": NEIGHBORS}
        params = {"temperature": 1.0, "logprobs": False}
        out = events.run_until_complete(loop.run(params, raw_prompt=msgs, extra_info=info, session_id=5))
        assert out.prompt_ids == chat_ids(worker.tokenizer, Q0)
        assert worker.llm_client.prompts[-1] == chat_ids(worker.tokenizer, NEIGHBORS[1])
        assert out.extra_fields["ta_variant"] == 2

        with pytest.raises(TAGRPOVerlError, match="agent_loop_manager_class"):
            events.run_until_complete(loop.run(params, raw_prompt=msgs, extra_info=info))
        with pytest.raises(TAGRPOVerlError, match="has 1 neighbors"):
            events.run_until_complete(loop.run(params, raw_prompt=msgs, extra_info={**info, "neighbors": NEIGHBORS[:1]}, session_id=4))
        image_msgs = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": Q0}]}]
        with pytest.raises(TAGRPOVerlError, match="not text"):
            events.run_until_complete(loop.run(params, raw_prompt=image_msgs, extra_info=info, session_id=2))
        loop.processor = object()
        with pytest.raises(TAGRPOVerlError, match="multimodal processor"):
            events.run_until_complete(loop.run(params, raw_prompt=msgs, extra_info=info, session_id=0))
    finally:
        events.close()
        asyncio.set_event_loop(None)


# ------------------------------------------------------------------------------------------
# verl's grpo estimator on the family == tagrpo's joint advantage
# ------------------------------------------------------------------------------------------


def test_verl_grpo_on_family_uid_equals_tagrpo_joint_advantage():
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    from tagrpo.core import group_advantages

    g = torch.Generator().manual_seed(0)
    families, N, G, T = 5, 3, 4, 7
    B = families * (N + 1) * G
    rewards = torch.randint(0, 2, (B,), generator=g).float()
    rewards[: (N + 1) * G] = 0.0
    rewards[3] = 1.0  # family 0: q0 has one correct answer, the neighbors none
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).float()  # (B, T)
    token_rewards = torch.zeros(B, T)
    token_rewards[torch.arange(B), lengths - 1] = rewards  # verl puts the score on the last token
    family = torch.arange(B) // ((N + 1) * G)  # (B,)
    variant = (torch.arange(B) % ((N + 1) * G)) // G  # (B,)

    uid = np.array([f"u{f}" for f in family.tolist()], dtype=object)
    adv, _ = compute_grpo_outcome_advantage(token_rewards, mask, uid)  # (B, T)
    ours = group_advantages(rewards, family, scale="group")  # (B,)
    torch.testing.assert_close(adv, ours[:, None] * mask, atol=1e-5, rtol=1e-5)

    per_variant = np.array([f"u{f}-{v}" for f, v in zip(family.tolist(), variant.tolist())], dtype=object)
    adv_sep, _ = compute_grpo_outcome_advantage(token_rewards, mask, per_variant)
    ours_sep = group_advantages(rewards, family * (N + 1) + variant, scale="group")
    torch.testing.assert_close(adv_sep, ours_sep[:, None] * mask, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(adv, adv_sep)
    # family 0: per-prompt grouping zeroes the neighbors (uniform), the family does not
    assert adv_sep[G : (N + 1) * G].abs().sum() == 0 and adv[G : (N + 1) * G].abs().sum() > 0


# ------------------------------------------------------------------------------------------
# a tiny model: the anchored padded row gives log pi(o | q0)
# ------------------------------------------------------------------------------------------


def _response_logprobs(model, input_ids, attention_mask, position_ids, n_response: int) -> torch.Tensor:
    from verl.utils.torch_functional import logprobs_from_logits

    with torch.no_grad():
        logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
    logp = logprobs_from_logits(logits[:, :-1], input_ids[:, 1:])  # (1, L-1)
    return logp[0, -n_response:]


def test_anchored_row_logprobs_equal_q0_unpadded_and_differ_from_neighbor(model_dir):
    from transformers import AutoModelForCausalLM

    worker = make_worker(small_config(model_dir))
    tok = worker.tokenizer
    batch = family_batch(n_rows=1, copies=6)
    batch.non_tensor_batch[SESSION_KEY] = np.arange(6)
    b = run_worker(worker, batch).batch
    model = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="eager", dtype=torch.float32).eval()

    i = 4  # a session of neighbor 2
    P = b["prompts"].shape[1]
    n_resp = int(b["attention_mask"][i, P:].sum())
    row = slice(i, i + 1)
    # the padded row exactly as verl's actor sees it (left-padded prompt, right-padded response)
    L = P + n_resp
    padded = _response_logprobs(model, b["input_ids"][row, :L], b["attention_mask"][row, :L],
                                b["position_ids"][row, :L], n_resp)
    response = b["responses"][i, :n_resp].tolist()
    q0 = torch.tensor([chat_ids(tok, Q0) + response])
    on_q0 = _response_logprobs(model, q0, torch.ones_like(q0), torch.arange(q0.shape[1])[None], n_resp)
    qn = torch.tensor([chat_ids(tok, NEIGHBORS[1]) + response])
    on_qn = _response_logprobs(model, qn, torch.ones_like(qn), torch.arange(qn.shape[1])[None], n_resp)
    torch.testing.assert_close(padded, on_q0, atol=1e-5, rtol=1e-5)
    assert (padded - on_qn).abs().max() > 1e-3
