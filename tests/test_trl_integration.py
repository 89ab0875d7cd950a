"""TA-GRPO through TRL's GRPOTrainer (`tagrpo.integrations.trl`), on a tiny random Llama, CPU only.

Checks the four things that make it TA-GRPO rather than GRPO: generation prompts laid out
[q0 x G, q1 x G, ..., qN x G] per question, every log-prob (old, ref, current) on q0's tokens,
advantages normalized over the whole family, and N=0 reducing exactly to plain GRPOTrainer.
"""

from __future__ import annotations

import math
import statistics
import subprocess
import sys

import pytest

pytest.importorskip("trl")

import torch
from datasets import Dataset

from tagrpo.integrations.trl import SUPPORTED_TRL, TAGRPOConfig, TAGRPOTrainer, check_trl_version
from tagrpo.models import save_tiny_model

N, G = 2, 2
FAMILY = (N + 1) * G


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def make_rows(n: int = 6) -> list[dict]:
    return [
        {
            "prompt": [
                {"role": "user", "content": f"Tom has {i} apples and buys 5 more. How many?"}
            ],
            "question": f"Tom has {i} apples and buys 5 more. How many?",
            "neighbors": [
                f"Given x = {i}, find x + 5.",
                f"What is {i} plus 5?",
                f"unused extra {i}",
            ],
            "answer": str(i + 5),
        }
        for i in range(n)
    ]


def config(tmp_path, **kw) -> TAGRPOConfig:
    base = {
        "output_dir": str(tmp_path / "out"),
        "num_neighbors": N,
        "samples_per_variant": G,
        "per_device_train_batch_size": 2 * FAMILY,  # two questions per step
        "max_completion_length": 8,
        "max_steps": 2,
        "learning_rate": 1e-3,
        "logging_steps": 1,
        "report_to": "none",
        "save_strategy": "no",
        "use_cpu": True,
        "seed": 0,
    }
    base.update(kw)
    return TAGRPOConfig(**base)


def token_reward(completion_ids, **kw):
    """A deterministic, non-binary reward of the sampled tokens (so advantages are non-trivial)."""
    return [float(sum(ids) % 3) for ids in completion_ids]


def render(tok, messages) -> str:
    return tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)


def strip_left_pad(ids: torch.Tensor, mask: torch.Tensor) -> list[int]:
    return ids[mask.bool()].tolist()


# ----------------------------------------------------------------------------------------------
# The trainer end to end
# ----------------------------------------------------------------------------------------------


def test_two_steps_generation_layout_anchored_logprobs_and_family_advantages(
    model_dir, tmp_path, monkeypatch
):
    from trl import GRPOTrainer

    rows = make_rows()
    seen_rewards: list[dict] = []

    def reward(prompts, completions, completion_ids, question, answer, neighbors, **kw):
        seen_rewards.append(
            {"prompts": prompts, "question": question, "answer": answer, "neighbors": neighbors}
        )
        return token_reward(completion_ids)

    # beta > 0 computes reference log-probs, num_iterations=2 computes old-policy log-probs
    args = config(tmp_path, beta=0.04, num_iterations=2)
    trainer = TAGRPOTrainer(
        model=model_dir, reward_funcs=reward, args=args, train_dataset=Dataset.from_list(rows)
    )
    tok = trainer.processing_class
    q0_text = {render(tok, r["prompt"]): r for r in rows}

    gen_calls, logp_calls, scored = [], [], []
    orig_single_turn = (
        GRPOTrainer._generate_single_turn
    )  # TRL's: what reaches the generation engine
    orig_logps = trainer._get_per_token_logps_and_entropies
    orig_score = trainer._generate_and_score_completions

    def rec_single_turn(self, prompt_ids, images, mm, num_generations, *a, **k):
        gen_calls.append(([tok.decode(ids) for ids in prompt_ids], num_generations))
        return orig_single_turn(self, prompt_ids, images, mm, num_generations, *a, **k)

    def rec_logps(model, input_ids, attention_mask, logits_to_keep, *a, **k):
        prompts = [
            tok.decode(strip_left_pad(ids[:-logits_to_keep], m[:-logits_to_keep]))
            for ids, m in zip(input_ids, attention_mask, strict=True)
        ]
        logp_calls.append(
            {"ref": model is trainer.ref_model, "grad": torch.is_grad_enabled(), "prompts": prompts}
        )
        return orig_logps(model, input_ids, attention_mask, logits_to_keep, *a, **k)

    def rec_score(inputs):
        out = orig_score(inputs)
        scored.append({"inputs": inputs, "advantages": out["advantages"].clone()})
        return out

    monkeypatch.setattr(GRPOTrainer, "_generate_single_turn", rec_single_turn)
    trainer._get_per_token_logps_and_entropies = rec_logps
    trainer._generate_and_score_completions = rec_score
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()

    assert trainer.state.global_step == 2
    assert gen_calls, "no generation happened"
    assert any(not torch.equal(before[n], p) for n, p in trainer.model.named_parameters()), (
        "no parameter moved"
    )

    # 1. generation prompts: per question [q0 x G, q1 x G, ..., qN x G]
    questions_in_batch = []
    for prompts, num_generations in gen_calls:
        assert (
            num_generations == G
        )  # completions per distinct prompt (what vLLM server mode dedupes on)
        assert len(prompts) == 2 * FAMILY
        for f in range(len(prompts) // FAMILY):
            block = prompts[f * FAMILY : (f + 1) * FAMILY]
            row = q0_text[block[0]]
            questions_in_batch.append(row)
            variants = [row["prompt"][0]["content"], *row["neighbors"][:N]]
            expected = [
                render(tok, [{"role": "user", "content": v}]) for v in variants for _ in range(G)
            ]
            assert block == expected
    anchors = [render(tok, r["prompt"]) for r in questions_in_batch]

    # 2. every log-prob TRL computes is on q0: old and ref (in batch order), current (shuffled)
    assert {c["ref"] for c in logp_calls} == {True, False}
    assert any(not c["grad"] and not c["ref"] for c in logp_calls), (
        "old-policy log-probs were not computed"
    )
    assert any(c["grad"] for c in logp_calls), "no current log-probs"
    for call in logp_calls:
        if call["grad"]:  # loss: shuffled rows; each must be one of the batch's original prompts
            assert set(call["prompts"]) <= set(anchors)
        else:  # old / ref: the whole generation batch in order
            assert call["prompts"] == [a for a in anchors for _ in range(FAMILY)]
    assert not any(
        nb in p for c in logp_calls for p in c["prompts"] for r in rows for nb in r["neighbors"]
    )

    # 3. reward functions see the original prompt of each row and the dataset columns
    assert seen_rewards
    for call in seen_rewards:
        for prompt, question, answer, nbs in zip(
            call["prompts"], call["question"], call["answer"], call["neighbors"], strict=True
        ):
            assert prompt == [{"role": "user", "content": question}]
            assert answer == str(int(question.split()[2]) + 5)
            assert len(nbs) == 3

    # 4. advantages: joint over each family of (N+1)*G, checked against a loop reference
    assert scored
    nonzero_std_families = 0
    for s in scored:
        adv = s["advantages"]
        assert adv.numel() == len(s["inputs"]) == 2 * FAMILY
        for f in range(adv.numel() // FAMILY):
            fam = adv[f * FAMILY : (f + 1) * FAMILY]
            assert abs(fam.mean().item()) < 1e-5
            nonzero_std_families += int(fam.abs().max().item() > 0)
    assert nonzero_std_families > 0, "every family was uniform: the test checked nothing"

    # 5. metrics reach TRL's log history
    logged = trainer.state.log_history[0]
    for key in (
        "uniform/q0_uniform",
        "uniform/q0_all_wrong",
        "uniform/family_uniform",
        "uniform/family_all_correct",
    ):
        assert key in logged
    assert 0.0 <= logged["uniform/family_uniform"] <= logged["uniform/q0_uniform"] <= 1.0


def test_advantages_and_uniform_metrics_match_references(model_dir, tmp_path):
    """One generation per step: the advantages equal a loop reference of the joint (family)
    normalization, and the logged uniform/* fractions equal a loop reference over the rewards."""
    batches = []

    def binary_reward(completion_ids, **kw):
        r = [float(len(ids) > 0 and ids[0] % 2 == 0) for ids in completion_ids]
        batches.append(r)
        return r

    args = config(tmp_path, max_steps=2)
    trainer = TAGRPOTrainer(
        model=model_dir,
        reward_funcs=binary_reward,
        args=args,
        train_dataset=Dataset.from_list(make_rows()),
    )
    advs = []
    orig = trainer._generate_and_score_completions
    trainer._generate_and_score_completions = lambda inputs: (
        out := orig(inputs),
        advs.append(out["advantages"]),
    )[0]
    trainer.train()
    assert len(batches) == len(advs) == 2

    for step, (r, adv) in enumerate(zip(batches, advs, strict=True)):
        expected = []
        fam_uniform, q0_uniform = [], []
        for f in range(len(r) // FAMILY):
            fam = r[f * FAMILY : (f + 1) * FAMILY]
            mean, std = statistics.fmean(fam), statistics.stdev(fam)
            expected += [(x - mean) / (std + 1e-4) for x in fam]
            fam_uniform.append(len(set(fam)) == 1)
            q0_uniform.append(len(set(fam[:G])) == 1)
        assert torch.allclose(adv, torch.tensor(expected), atol=1e-5)
        log = trainer.state.log_history[step]
        assert log["uniform/family_uniform"] == pytest.approx(statistics.fmean(fam_uniform))
        assert log["uniform/q0_uniform"] == pytest.approx(statistics.fmean(q0_uniform))
        q0 = [x for f in range(len(r) // FAMILY) for x in r[f * FAMILY : f * FAMILY + G]]
        assert log["rewards/q0_mean"] == pytest.approx(statistics.fmean(q0))


def test_zero_neighbors_equals_plain_grpo_trainer(model_dir, tmp_path):
    from trl import GRPOConfig, GRPOTrainer

    rows = make_rows()
    common = {
        "per_device_train_batch_size": 8,
        "max_completion_length": 8,
        "max_steps": 2,
        "learning_rate": 1e-2,
        "logging_steps": 1,
        "report_to": "none",
        "save_strategy": "no",
        "use_cpu": True,
        "seed": 0,
    }
    ta = TAGRPOTrainer(
        model=model_dir,
        reward_funcs=token_reward,
        args=TAGRPOConfig(
            output_dir=str(tmp_path / "ta"), num_neighbors=0, samples_per_variant=4, **common
        ),
        train_dataset=Dataset.from_list(rows),
    )
    ta.train()
    plain = GRPOTrainer(
        model=model_dir,
        reward_funcs=token_reward,
        args=GRPOConfig(output_dir=str(tmp_path / "plain"), num_generations=4, **common),
        train_dataset=Dataset.from_list(rows),
    )
    init = {n: p.detach().clone() for n, p in plain.model.named_parameters()}
    plain.train()

    ta_params = dict(ta.model.named_parameters())
    moved = 0
    for name, p in plain.model.named_parameters():
        assert torch.equal(p, ta_params[name]), name
        moved += int(not torch.equal(p, init[name]))
    assert moved > 0, "plain GRPO did not move: the comparison is vacuous"
    for a, b in zip(ta.state.log_history[:2], plain.state.log_history[:2], strict=True):
        assert a["loss"] == b["loss"]
        assert a["reward"] == b["reward"]


def fake_vllm_trainer(model_dir, tmp_path, monkeypatch, calls=None, **kw) -> TAGRPOTrainer:
    """A trainer on one family per batch whose "vLLM" returns fixed completions (a few distinct
    ones per row) with sampler log-probs -0.5 per token, so that TRL runs its vLLM code path
    (importance-sampling correction, `sampling/*` metrics, sampler log-probs) without an engine."""
    from trl import GRPOTrainer

    kw = {
        "per_device_train_batch_size": FAMILY,
        "vllm_importance_sampling_mode": "token_truncate",
        **kw,
    }
    trainer = TAGRPOTrainer(
        model=model_dir,
        reward_funcs=token_reward,
        args=config(tmp_path, **kw),
        train_dataset=Dataset.from_list(make_rows(2)),
    )

    def fake_vllm(self, prompt_ids, images, mm, num_generations, has_tool_images=False):
        if calls is not None:
            calls.append(num_generations)
        completion_ids = [[5 + j % 4, 6 + j % 3, 7, 2] for j in range(len(prompt_ids))]  # 2 = eos
        return completion_ids, [[-0.5] * 4 for _ in prompt_ids]

    monkeypatch.setattr(GRPOTrainer, "_generate_single_turn", fake_vllm)
    trainer.use_vllm = True  # TRL's vLLM branches of _generate_and_score_completions, no engine
    trainer.model.train()
    return trainer


def one_family() -> list[dict]:
    return [dict(make_rows(1)[0]) for _ in range(FAMILY)]


def test_vllm_importance_correction_is_off_for_neighbor_rows_only(model_dir, tmp_path, monkeypatch):
    """With vLLM the sampler's log-probs of a neighbor completion are conditioned on the neighbor;
    TA-GRPO keeps them out of TRL's importance-sampling ratio, which is exactly 1 there, and keeps
    the correction on q0."""
    calls = []
    trainer = fake_vllm_trainer(model_dir, tmp_path, monkeypatch, calls=calls)
    out = trainer._generate_and_score_completions(one_family())

    assert calls == [G]
    ratio = out["importance_sampling_ratio"]  # (B, T)
    assert ratio.shape[0] == FAMILY
    assert torch.all(ratio[G:] == 1.0)  # neighbor rows: no correction
    assert not torch.all(ratio[:G] == 1.0)  # q0 rows: corrected (random model's logp != -0.5)
    assert torch.all(out["sampling_per_token_logps"][:G] == -0.5)  # q0 rows: the sampler's
    assert torch.isfinite(out["sampling_per_token_logps"]).all()
    assert math.isfinite(trainer._metrics["train"]["sampling/sampling_logp_difference/mean"][-1])


def test_neighbor_rows_carry_anchored_sampler_logps(model_dir, tmp_path, monkeypatch):
    """Neighbor rows' sampler log-probs are log pi(o | q0) of the policy (what TRL's off-policy
    mask needs), not NaN and not the sampler's log pi(o | qn)."""
    trainer = fake_vllm_trainer(model_dir, tmp_path, monkeypatch)
    row = make_rows(1)[0]
    out = trainer._generate_and_score_completions(one_family())
    sampling = out["sampling_per_token_logps"]  # (B, T)
    assert not torch.isnan(sampling).any()
    assert torch.equal(sampling[G:], out["old_per_token_logps"][G:])

    tok, model = trainer.processing_class, trainer.model

    def logps(messages, completion: list[int]) -> torch.Tensor:  # (T,), as TRL: autocast on
        ids = tok(render(tok, messages), add_special_tokens=False)["input_ids"]
        with torch.no_grad(), trainer.accelerator.autocast():
            logits = model(torch.tensor([ids + completion])).logits[0, len(ids) - 1 : -1]  # (T, V)
        return torch.log_softmax(logits.float(), dim=-1)[range(len(completion)), completion]

    q0_ids = tok(render(tok, row["prompt"]), add_special_tokens=False)["input_ids"]
    checked = 0
    for j in range(G, FAMILY):
        assert strip_left_pad(out["prompt_ids"][j], out["prompt_mask"][j]) == q0_ids
        comp = out["completion_ids"][j][out["completion_mask"][j].bool()].tolist()
        got = sampling[j, : len(comp)]  # (T,)
        torch.testing.assert_close(got, logps(row["prompt"], comp), atol=1e-5, rtol=1e-5)
        # and not log pi(o | qn), nor the sampler's -0.5 (both far enough for the check to tell)
        neighbor = [{"role": "user", "content": row["neighbors"][j // G - 1]}]
        assert (got - logps(neighbor, comp)).abs().max() > 1e-2
        assert (got - -0.5).abs().min() > 0.1
        checked += 1
    assert checked == N * G


@pytest.mark.parametrize("drift", [False, True])
def test_off_policy_mask_drops_drifted_neighbor_rows(model_dir, tmp_path, monkeypatch, drift):
    """TRL's off-policy sequence mask sees the anchored drift log pi_old(o | q0) - log pi(o | q0) of
    neighbor rows: a negative-advantage neighbor completion is dropped once the policy has moved
    past the threshold since generation, and kept while it has not."""
    from trl import GRPOTrainer

    threshold = 0.1
    trainer = fake_vllm_trainer(
        model_dir, tmp_path, monkeypatch, off_policy_mask_threshold=threshold, num_iterations=2
    )
    out = trainer._generate_and_score_completions(one_family())
    out["advantages"] = -torch.ones_like(out["advantages"])  # (B,): every row may be dropped
    if drift:  # the policy moves between generation and this loss step: sharper logits
        with torch.no_grad():
            trainer.model.model.norm.weight.mul_(30.0)

    seen = []

    def record_mask(**kw):
        mask = GRPOTrainer.get_off_policy_mask(**kw)  # (B, 1)
        seen.append((kw, mask))
        return mask

    trainer.get_off_policy_mask = record_mask
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer's loop, which is not running
    trainer._compute_loss(trainer.model, out)
    ((kw, mask),) = seen

    # the premise, measured without the sampler log-probs: the anchored drift per row
    tok_mask = kw["mask"].float()  # (B, T)
    drift_q0 = ((out["old_per_token_logps"] - kw["per_token_logps"]) * tok_mask).sum(1)  # (B,)
    drift_q0 = drift_q0 / tok_mask.sum(1)  # (B,)
    if drift:
        assert (drift_q0[G:] > threshold).all()
        assert torch.all(mask[G:] == 0.0)  # neighbor rows dropped
    else:
        assert drift_q0[G:].abs().max() < 1e-4
        assert torch.all(mask[G:] == 1.0)  # neighbor rows kept


@pytest.mark.parametrize("mode", ["token_truncate", "sequence_mask"])
def test_sampling_metrics_are_over_q0_rows_only(model_dir, tmp_path, monkeypatch, mode):
    """`sampling/*` (sampler-vs-trainer mismatch) is measured on q0 rows only: neighbor rows have
    no sampler mismatch to measure (their ratio is a constant 1)."""
    trainer = fake_vllm_trainer(
        model_dir, tmp_path, monkeypatch, vllm_importance_sampling_mode=mode
    )
    out = trainer._generate_and_score_completions(one_family())
    logged = trainer._metrics["train"]
    mask = out["completion_mask"].bool()  # (B, T)
    ratio = out["importance_sampling_ratio"]  # (B, T) or (B, 1)
    seq = mode.startswith("sequence")
    assert ratio.shape[1] == (1 if seq else mask.shape[1])
    q0_ratio = ratio[:G].flatten() if seq else ratio[:G][mask[:G]]
    all_ratio = ratio.flatten() if seq else ratio[mask]
    delta = (out["old_per_token_logps"][:G] - -0.5).abs()[mask[:G]]  # the sampler said -0.5
    expected = {
        "sampling/importance_sampling_ratio/min": q0_ratio.min().item(),
        "sampling/importance_sampling_ratio/mean": q0_ratio.mean().item(),
        "sampling/importance_sampling_ratio/max": q0_ratio.max().item(),
        "sampling/sampling_logp_difference/mean": delta.mean().item(),
        "sampling/sampling_logp_difference/max": delta.max().item(),
    }
    for key, value in expected.items():
        assert len(logged[key]) == 1, key  # one value per batch: replaced, not appended
        assert logged[key][0] == pytest.approx(value, rel=1e-5), key
    # the test can fail: counting the neighbor rows (ratio 1) would change the ratio metrics
    assert all_ratio.max().item() == 1.0
    assert q0_ratio.max().item() != pytest.approx(1.0)
    assert all_ratio.mean().item() != pytest.approx(q0_ratio.mean().item())


def test_q0_sampling_metrics_ignore_neighbor_and_nan_tokens():
    from tagrpo.integrations._trl_trainer import q0_sampling_metrics

    old = torch.tensor([[-1.0, -2.0, -3.0], [-1.0, -1.0, -1.0], [-4.0, -4.0, -4.0]])  # (B, T)
    sampling = torch.tensor([[-1.5, math.nan, -2.0], [-1.0, -1.0, -1.0], [-9.0, -9.0, -9.0]])
    mask = torch.tensor([[True, True, False], [True, True, True], [True, False, False]])
    is_q0 = torch.tensor([True, False, True])
    ratio = torch.exp(torch.nan_to_num((old - sampling) * mask, nan=0.0))  # (B, T)
    m = q0_sampling_metrics(old, sampling, ratio, mask, is_q0, sequence_level=False)
    # q0 tokens: row 0 col 0 (delta 0.5), row 0 col 1 (NaN, left out), row 2 col 0 (delta 5)
    assert m["sampling_logp_difference/mean"].item() == pytest.approx(2.75)
    assert m["sampling_logp_difference/max"].item() == pytest.approx(5.0)
    # ratios of q0 tokens: exp(0.5), 1 (row 0 col 1: NaN sampler log-prob, TRL's ratio 1 there is
    # counted, as TRL does), exp(5); row 1 (a neighbor, ratio 1) is not
    assert m["importance_sampling_ratio/min"].item() == pytest.approx(1.0)
    assert m["importance_sampling_ratio/max"].item() == pytest.approx(math.exp(5.0))
    assert m["importance_sampling_ratio/mean"].item() == pytest.approx(
        (math.exp(0.5) + 1.0 + math.exp(5.0)) / 3
    )
    seq = q0_sampling_metrics(
        old, sampling, torch.tensor([[2.0], [1.0], [4.0]]), mask, is_q0, sequence_level=True
    )
    assert seq["importance_sampling_ratio/mean"].item() == pytest.approx(3.0)
    none = q0_sampling_metrics(old, sampling, ratio, mask, torch.zeros(3, dtype=torch.bool), False)
    assert all(math.isnan(v.item()) for v in none.values())


# ----------------------------------------------------------------------------------------------
# Errors a user can act on
# ----------------------------------------------------------------------------------------------


def test_config_sets_family_size(tmp_path):
    args = config(tmp_path)
    assert args.num_generations == FAMILY
    assert args.generation_batch_size == 2 * FAMILY


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({"per_device_train_batch_size": 8}, "multiple of the family size"),
        ({"num_generations": 4}, "conflicts with"),
        ({"remove_unused_columns": True}, "neighbors"),
        ({"num_neighbors": -1}, "num_neighbors must be >= 0"),
        ({"samples_per_variant": 0}, "samples_per_variant must be >= 1"),
        ({"num_neighbors": 0, "samples_per_variant": 1, "per_device_train_batch_size": 2}, ">= 2"),
    ],
)
def test_config_errors(tmp_path, kw, needle):
    with pytest.raises(ValueError, match=needle):
        config(tmp_path, **kw)


def test_version_check_names_supported_range():
    check_trl_version("1.16.0")
    check_trl_version("1.16.9")
    for bad in ("1.15.2", "1.17.0", "2.0.0"):
        with pytest.raises(ValueError, match=r"trl>=1\.16,<1\.17") as err:
            check_trl_version(bad)
        assert bad in str(err.value)
    assert SUPPORTED_TRL in str(pytest.raises(ValueError, check_trl_version, "0.1").value)


def test_trainer_refuses_unsupported_versions(model_dir, tmp_path, monkeypatch):
    import trl

    args = config(tmp_path)
    monkeypatch.setattr(trl, "__version__", "1.99.0")
    with pytest.raises(ValueError, match="supports trl>=1.16,<1.17, but trl 1.99.0"):
        TAGRPOTrainer(
            model=model_dir,
            reward_funcs=token_reward,
            args=args,
            train_dataset=Dataset.from_list(make_rows()),
        )


def test_dataset_errors(model_dir, tmp_path):
    args = config(tmp_path)
    rows = make_rows()
    no_col = [{k: v for k, v in r.items() if k != "neighbors"} for r in rows]
    with pytest.raises(ValueError, match="no 'neighbors' column"):
        TAGRPOTrainer(
            model=model_dir,
            reward_funcs=token_reward,
            args=args,
            train_dataset=Dataset.from_list(no_col),
        )
    short = [dict(r) for r in rows]
    short[3]["neighbors"] = ["only one"]
    with pytest.raises(
        ValueError,
        match=r"row 3: field 'neighbors' holds 1 rewording\(s\).*at least num_neighbors=2",
    ):
        TAGRPOTrainer(
            model=model_dir,
            reward_funcs=token_reward,
            args=args,
            train_dataset=Dataset.from_list(short),
        )
    empty = [dict(r) for r in rows]
    empty[1]["neighbors"] = ["ok", "  ", "x"]
    with pytest.raises(ValueError, match=r"row 1: field 'neighbors'\[1\] is an empty string"):
        TAGRPOTrainer(
            model=model_dir,
            reward_funcs=token_reward,
            args=args,
            train_dataset=Dataset.from_list(empty),
        )
    with pytest.raises(ValueError, match="needs args=TAGRPOConfig"):
        from trl import GRPOConfig

        TAGRPOTrainer(
            model=model_dir,
            reward_funcs=token_reward,
            args=GRPOConfig(output_dir=str(tmp_path / "g"), report_to="none", use_cpu=True),
            train_dataset=Dataset.from_list(rows),
        )


def test_refuses_tools(model_dir, tmp_path):
    def add(a: int, b: int) -> int:
        """Add two numbers.

        Args:
            a: first
            b: second
        """
        return a + b

    with pytest.raises(ValueError, match="does not support tools="):
        TAGRPOTrainer(
            model=model_dir,
            reward_funcs=token_reward,
            args=config(tmp_path),
            train_dataset=Dataset.from_list(make_rows()),
            tools=[add],
        )


# ----------------------------------------------------------------------------------------------
# Pure helpers
# ----------------------------------------------------------------------------------------------


def test_variant_indices_follow_global_position():
    from tagrpo.integrations._trl_trainer import variant_indices

    assert variant_indices(12, 0, 2, 2) == [0, 0, 1, 1, 2, 2] * 2
    # a second process whose rows start mid-family
    assert variant_indices(4, 4, 2, 2) == [2, 2, 0, 0]
    assert variant_indices(3, 0, 0, 3) == [0, 0, 0]


def test_variant_prompt_keeps_the_template_around_the_question():
    from tagrpo.integrations._trl_trainer import variant_prompt

    sys_msg = {"role": "system", "content": "Be brief."}
    conv = [sys_msg, {"role": "user", "content": "Solve: Q here. Put the answer in \\boxed{}."}]
    assert variant_prompt(conv, "R there", "Q here") == [
        sys_msg,
        {"role": "user", "content": "Solve: R there. Put the answer in \\boxed{}."},
    ]
    assert conv[1]["content"].startswith("Solve: Q")  # not mutated
    assert variant_prompt(conv, "R there", None)[1] == {"role": "user", "content": "R there"}
    assert variant_prompt("Q: Q here\nA:", "R there", "Q here") == "Q: R there\nA:"
    assert variant_prompt("plain", "R there", "absent") == "R there"
    whole = [{"role": "user", "content": "custom"}]
    assert variant_prompt(conv, whole, "Q here") == whole


def test_family_metrics_against_loop():
    from tagrpo.integrations._trl_trainer import family_reward_metrics

    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        n, g, fams = (
            1 + int(torch.randint(0, 3, (1,), generator=gen)),
            1 + int(torch.randint(0, 3, (1,), generator=gen)),
            5,
        )
        size = (n + 1) * g
        r = (torch.rand(fams * size, generator=gen) < 0.3).float()
        m = family_reward_metrics(r, n, g)
        groups = [r[f * size : (f + 1) * size].tolist() for f in range(fams)]
        assert m["uniform/family_uniform"] == pytest.approx(
            statistics.fmean(len(set(x)) == 1 for x in groups)
        )
        assert m["uniform/family_all_wrong"] == pytest.approx(
            statistics.fmean(set(x) == {0.0} for x in groups)
        )
        assert m["uniform/q0_uniform"] == pytest.approx(
            statistics.fmean(len(set(x[:g])) == 1 for x in groups)
        )
        assert m["uniform/q0_all_correct"] == pytest.approx(
            statistics.fmean(set(x[:g]) == {1.0} for x in groups)
        )
        assert m["rewards/neighbors_mean"] == pytest.approx(
            statistics.fmean(v for x in groups for v in x[g:])
        )


def test_import_tagrpo_does_not_import_trl():
    code = (
        "import sys, tagrpo, tagrpo.integrations, tagrpo.integrations.trl as t\n"
        "assert 'trl' not in sys.modules, 'trl imported'\n"
        "assert t.SUPPORTED_TRL and 'TAGRPOTrainer' in dir(t)\n"
        "assert 'trl' not in sys.modules, 'trl imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
