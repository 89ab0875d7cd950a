"""The rollout engine's own decode loop against transformers' `generate` and reference samplers."""

from __future__ import annotations

import math

import pytest
import torch

from tagrpo.models.tiny import make_tiny_model
from tagrpo.rollout import HFGenerateEngine, SamplingParams
from tagrpo.rollout.hf import sample_tokens


@pytest.fixture(scope="module")
def tiny():
    model, tok = make_tiny_model(seed=3)
    model.eval()
    return model, tok


def _prompts(tok, texts, repeat=1):
    return [tok(t, add_special_tokens=False)["input_ids"] for t in texts for _ in range(repeat)]


def _hf_greedy(model, tok, prompts, max_new):
    """transformers' generate on the same left-padded batch, one prompt at a time (no padding)."""
    out = []
    for p in prompts:
        ids = torch.tensor([p])
        g = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=max_new,
                           pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
        out.append(g[0, len(p):].tolist())
    return out


@pytest.mark.parametrize("share", [False, True])
def test_greedy_matches_transformers_generate(tiny, share):
    model, tok = tiny
    prompts = _prompts(tok, ["1 2 3 4 5 6", "7 8", "a b c d", "7 8"], repeat=2)  # repeats and mixed lengths
    ref = _hf_greedy(model, tok, prompts, 12)
    eng = HFGenerateEngine(model, tok, max_batch_size=8, share_prompts=share)
    got = eng.generate(prompts, SamplingParams(do_sample=False, max_new_tokens=12))
    for r, c in zip(ref, got):
        # ours stops at EOS; generate pads after it
        assert c.token_ids == r[: len(c.token_ids)]
        assert c.finished == (tok.eos_token_id in r)
    if share:
        assert eng.prefill_rows_saved == 5  # 8 rows, 3 distinct prompts ("7 8" is there 4 times)


def test_shared_prefill_gives_the_same_logits_as_a_full_prefill(tiny):
    """Sampling with a fixed seed: with or without prompt sharing, the same tokens."""
    model, tok = tiny
    prompts = _prompts(tok, ["3 1 4 1 5", "9 2 6"], repeat=4)
    p = SamplingParams(temperature=1.0, max_new_tokens=10, seed=7)
    a = HFGenerateEngine(model, tok, share_prompts=False).generate(prompts, p)
    b = HFGenerateEngine(model, tok, share_prompts=True).generate(prompts, p)
    assert [c.token_ids for c in a] == [c.token_ids for c in b]


def test_same_seed_same_samples_and_batch_size_does_not_matter_for_greedy(tiny):
    model, tok = tiny
    prompts = _prompts(tok, ["5 5 5", "1 2", "8 8 8 8"], repeat=3)
    eng = HFGenerateEngine(model, tok, max_batch_size=4)
    p = SamplingParams(temperature=0.8, max_new_tokens=8, seed=11)
    assert [c.token_ids for c in eng.generate(prompts, p)] == [c.token_ids for c in eng.generate(prompts, p)]
    g = SamplingParams(do_sample=False, max_new_tokens=8)
    big = HFGenerateEngine(model, tok, max_batch_size=64).generate(prompts, g)
    small = HFGenerateEngine(model, tok, max_batch_size=2).generate(prompts, g)
    assert [c.token_ids for c in big] == [c.token_ids for c in small]


def test_rows_stop_at_eos_and_the_others_go_on(tiny):
    model, tok = tiny
    prompts = _prompts(tok, ["1 2 3", "4 5 6 7", "9"], repeat=4)
    out = HFGenerateEngine(model, tok).generate(prompts, SamplingParams(temperature=1.5, max_new_tokens=20, seed=0))
    for c in out:
        assert len(c.token_ids) <= 20
        if c.finished:
            assert c.token_ids[-1] == tok.eos_token_id and tok.eos_token_id not in c.token_ids[:-1]
        else:
            assert len(c.token_ids) == 20 and tok.eos_token_id not in c.token_ids


def test_bf16_rollout_copy_follows_the_weights(tiny):
    model, tok = tiny
    model = __import__("copy").deepcopy(model)
    eng = HFGenerateEngine(model, tok, dtype="bf16")
    prompts = _prompts(tok, ["1 2 3"], repeat=2)
    g = SamplingParams(do_sample=False, max_new_tokens=6)
    eng.generate(prompts, g)
    assert all(p.dtype == torch.bfloat16 for p in eng._copy.parameters())
    assert all(p.dtype == torch.float32 for p in model.parameters())  # the trained model is untouched
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(-1.0)
    eng.generate(prompts, g)
    for a, b in zip(eng._copy.parameters(), model.parameters()):
        torch.testing.assert_close(a.float(), b, atol=1e-2, rtol=1e-2)


def test_released_bf16_copy_frees_its_weights_and_comes_back_the_same(tiny):
    model, tok = tiny
    model = __import__("copy").deepcopy(model)
    kept, released = HFGenerateEngine(model, tok, dtype="bf16"), HFGenerateEngine(model, tok, dtype="bf16")
    prompts = _prompts(tok, ["1 2 3", "4 5"], repeat=2)
    g = SamplingParams(temperature=1.0, max_new_tokens=8, seed=3)
    for step in range(2):
        if step:
            with torch.no_grad():  # an update between rollouts
                for p in model.parameters():
                    p.add_(0.01 * torch.randn_like(p))
        a, b = kept.generate(prompts, g), released.generate(prompts, g)
        assert [c.token_ids for c in a] == [c.token_ids for c in b]
        for x, y in zip(kept._copy.parameters(), released._copy.parameters()):
            assert torch.equal(x, y)
        released.release_copy()  # what the trainer does before its update (lean CPU memory)
        assert all(p.numel() == 0 for p in released._copy.parameters())
        assert all(p.numel() > 0 for p in model.parameters())  # the trained model is untouched


def test_bad_engine_arguments_name_the_valid_choices(tiny):
    model, tok = tiny
    with pytest.raises(ValueError, match="fp32, bf16"):
        HFGenerateEngine(model, tok, dtype="fp16")
    with pytest.raises(ValueError, match="max_batch_size"):
        HFGenerateEngine(model, tok, max_batch_size=0)


# --- the sampler against its definition -----------------------------------------------------


def _reference_probs(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """Slow loop: softmax(logits / T), then keep tokens in descending order until the mass reaches top_p."""
    probs = torch.softmax(logits.double() / temperature, -1)
    order = sorted(range(len(probs)), key=lambda i: -float(probs[i]))
    keep, mass = [], 0.0
    for i in order:
        keep.append(i)
        mass += float(probs[i])
        if mass >= top_p:
            break
    out = torch.zeros_like(probs)
    out[keep] = probs[keep]
    return out / out.sum()


@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.6, 1.0), (1.0, 0.8), (0.7, 0.5)])
def test_sampler_frequencies_match_the_distribution(temperature, top_p):
    torch.manual_seed(0)
    v, draws = 12, 40_000
    logits = torch.randn(v) * 2
    want = _reference_probs(logits, temperature, top_p)
    toks = sample_tokens(logits.expand(draws, v).clone(), temperature, top_p)
    freq = torch.bincount(toks, minlength=v).double() / draws
    assert freq[want == 0].sum() == 0  # nothing outside the nucleus, ever
    # each frequency within 5 standard errors of its probability
    se = torch.sqrt(want * (1 - want) / draws)
    assert torch.all((freq - want).abs() <= 5 * se + 1e-12), (freq, want)


def test_sampler_greedy_and_degenerate_rows():
    logits = torch.tensor([[0.0, 5.0, 1.0], [2.0, -1.0, 0.0]])
    assert sample_tokens(logits, 0.0, 1.0).tolist() == [1, 0]
    one_hot = torch.tensor([[-math.inf, 0.0, -math.inf]]).expand(1000, 3)
    assert set(sample_tokens(one_hot, 1.0, 1.0).tolist()) == {1}
    assert set(sample_tokens(one_hot, 1.0, 0.3).tolist()) == {1}
