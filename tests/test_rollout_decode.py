"""The preallocated-cache decode step (rollout/decode.py) against transformers' own forward.

`FastDecoder.step` must give the logits the model gives on the whole sequence so far, for every
covered architecture (Llama with GQA, Qwen2 with q/k/v biases and an untied head, Qwen3 with
q/k norms and its own head_dim, Mistral without a window), through left padding, cache growth,
padded row counts and dropped rows; the engine must give the same tokens with and without it;
and everything it does not cover must keep transformers' forward.
"""

from __future__ import annotations

import copy

import pytest
import torch

from tagrpo.models.tiny import make_tiny_model, make_tiny_tokenizer
from tagrpo.rollout import HFGenerateEngine, SamplingParams, decode, packing
from tagrpo.rollout.batching import left_pad, output_cache
from tagrpo.rollout.decode import FastDecoder, _pad_index, _padded_rows, unsupported_reason

ATOL, RTOL = 1e-4, 1e-4  # fp32: the two paths differ only in summation order


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny matrices gain nothing from threads, and on a busy machine a thread pool waiting on a
    descheduled worker makes this file several times slower."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def tok():
    return make_tiny_tokenizer()


def _perturb(model, seed):
    """Random norm weights and biases (initialised to 1 and 0: a path that skipped them would
    pass), and projections 6x their initial scale (at std 0.02 the layers barely change the
    residual stream, and greedy decoding repeats the prompt's last token)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(0.3 * torch.randn(p.shape, generator=g))
            elif name.endswith("proj.weight"):
                p.mul_(6.0)
    return model.eval()


def _config_kwargs(tok):
    return {"vocab_size": len(tok), "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 1024,
            "pad_token_id": tok.pad_token_id, "eos_token_id": tok.eos_token_id, "bos_token_id": tok.bos_token_id}


def _build(kind, tok, seed=0, **extra):
    """A tiny random model of one architecture, with perturbed norms and biases, in eval mode."""
    import transformers as tf

    if kind == "llama":
        model, _ = make_tiny_model(tok, seed=seed)
        return _perturb(model, seed)
    kw = _config_kwargs(tok)
    if kind == "llama_rope_scaled":
        cfg = tf.LlamaConfig(**kw, rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0})
        cls = tf.LlamaForCausalLM
    elif kind == "qwen2":  # q/k/v biases, untied lm_head
        cfg, cls = tf.Qwen2Config(**kw, tie_word_embeddings=False, **extra), tf.Qwen2ForCausalLM
    elif kind == "qwen3":  # q_norm/k_norm, head_dim != hidden / heads
        cfg, cls = tf.Qwen3Config(**kw, head_dim=32, tie_word_embeddings=True, **extra), tf.Qwen3ForCausalLM
    elif kind == "mistral":
        cfg, cls = tf.MistralConfig(**{"sliding_window": None, **kw, **extra}), tf.MistralForCausalLM
    else:
        raise ValueError(kind)
    torch.manual_seed(seed)
    model = cls(cfg)
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    return _perturb(model, seed)


COVERED = ["llama", "qwen2", "qwen3", "mistral", "llama_rope_scaled"]


@pytest.fixture(scope="module")
def models(tok):
    return {kind: _build(kind, tok, seed=i + 1) for i, kind in enumerate(COVERED)}


def _random_prompts(n, vocab, seed, lo=1, hi=9):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(lo, hi + 1, (n,), generator=g).tolist()
    lengths[0] = hi  # at least one row unpadded, others left-padded
    return [torch.randint(3, vocab, (n_,), generator=g).tolist() for n_ in lengths]


def _reference_logits(model, seqs, pad_id):
    """Last-position logits of the model's own forward on each left-padded sequence."""
    ids, att, pos = left_pad(seqs, pad_id)
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=att, position_ids=pos, logits_to_keep=1).logits[:, -1]


def _prefill(model, prompts, pad_id, chunk, bucket=16, packed=None):
    ids, att, pos = left_pad(prompts, pad_id)  # (b, L) each
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=True)
    fd = FastDecoder(model, chunk=chunk, bucket=bucket, packed=packed)
    fd.load(output_cache(out), att)
    return fd, out.logits[:, -1], pos[:, -1] + 1


def _check_decode(model, prompts, pad_id, steps=20, chunk=4, drops=None, seed=0, bucket=16, packed=None,
                  atol=ATOL, rtol=RTOL):
    """Decode `steps` random tokens with FastDecoder and compare every step's logits with the
    model's forward on the whole sequence so far. `drops`: {step: rows (of the original batch) to
    keep from that step on}, applied with select_rows."""
    fd, logits, next_pos = _prefill(model, prompts, pad_id, chunk, bucket, packed)
    torch.testing.assert_close(logits, _reference_logits(model, prompts, pad_id), atol=atol, rtol=rtol)
    g = torch.Generator().manual_seed(seed)
    seqs = [list(p) for p in prompts]
    live = list(range(len(prompts)))  # original rows still in the decoder, in its order
    capacities = {fd.keys[0].shape[2]}
    for t in range(steps):
        if drops and t in drops:
            keep = [live.index(r) for r in drops[t]]
            fd.select_rows(torch.tensor(keep))
            live = list(drops[t])
        tok = torch.randint(3, model.config.vocab_size, (len(seqs),), generator=g)  # (B,) all rows
        for r, v in enumerate(tok.tolist()):
            seqs[r].append(v)
        got = fd.step(tok[live], next_pos[live])  # (b_live, V)
        next_pos = next_pos + 1
        want = _reference_logits(model, [seqs[r] for r in live], pad_id)
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, atol=atol, rtol=rtol, msg=lambda m, t=t: f"step {t}: {m}")
        capacities.add(fd.keys[0].shape[2])
        assert fd.keys[0].shape[0] == fd.mask.shape[0] == _padded_rows(len(live))
    return capacities


# --- logits against transformers --------------------------------------------------------------


@pytest.mark.parametrize("kind", COVERED)
def test_step_logits_equal_the_models_forward(models, tok, kind):
    """Left-padded batch of 5 rows (padded to 8 inside), 20 steps with a 4-position chunk: the
    buffers grow five times on the way."""
    model = models[kind]
    assert unsupported_reason(model) is None
    prompts = _random_prompts(5, model.config.vocab_size, seed=10)
    assert len({len(p) for p in prompts}) > 1
    caps = _check_decode(model, prompts, tok.pad_token_id, steps=20, chunk=4)
    width = max(len(p) for p in prompts)
    assert caps == {width + 4 * k for k in range(1, 6)}  # grown in chunks of 4, once per 4 steps


@pytest.mark.parametrize("kind", ["llama", "qwen3"])
def test_attention_reads_bucketed_widths_with_the_same_logits(models, tok, kind, monkeypatch):
    """The step's attention reads the cache in widths rounded up to the bucket (few distinct
    shapes: oneDNN keeps a compiled kernel per shape), the positions not written yet masked:
    every step's logits still equal the model's forward, and 30 steps use 4-5 widths, not 30."""
    import tagrpo.rollout.decode as D

    widths = []
    real = D.F.softmax

    def spy(x, *a, **k):
        widths.append(x.shape[-1])
        return real(x, *a, **k)

    monkeypatch.setattr(D.F, "softmax", spy)
    model = models[kind]
    prompts = _random_prompts(6, model.config.vocab_size, seed=7)
    _check_decode(model, prompts, tok.pad_token_id, steps=30, chunk=40, bucket=8, drops={12: [5, 1, 0]})
    width = max(len(p) for p in prompts)
    assert all(w % 8 == 0 for w in widths)
    assert set(widths) == {-(-(width + t + 1) // 8) * 8 for t in range(30)}
    assert len(set(widths)) <= 5


@pytest.mark.parametrize("rows", [1, 2, 3, 11, 17])
def test_padded_batch_sizes_and_dropped_rows(models, tok, rows):
    """Batches padded to 4, 16 and 32 rows inside; rows leave at two points (down to 1 row), the
    kept rows' logits still equal their own reference computation."""
    model = models["llama"]
    prompts = _random_prompts(rows, model.config.vocab_size, seed=rows)
    drops = None
    if rows > 1:
        g = torch.Generator().manual_seed(rows)
        first = sorted(torch.randperm(rows, generator=g)[: max(1, (rows + 1) // 2)].tolist())
        first = first[::-1] if rows > 3 else first  # any order select_rows is given is kept
        drops = {6: first, 13: first[-1:]}
    _check_decode(model, prompts, tok.pad_token_id, steps=18, chunk=5, drops=drops, seed=rows)


def test_rows_that_leave_without_shrinking_the_padded_batch_stay_as_padding(models, tok):
    """11 rows (16 computed): dropping to 10 and then 9 rows, reordered, keeps 16 buffer rows (no
    copy of the keys and values) and the live rows' logits still equal their reference."""
    model = models["llama"]
    prompts = _random_prompts(11, model.config.vocab_size, seed=5)
    _check_decode(model, prompts, tok.pad_token_id, steps=10, chunk=4,  # asserts 16 buffer rows throughout
                  drops={3: [10, 0, 1, 2, 3, 4, 5, 6, 7, 9], 6: [9, 7, 6, 5, 4, 3, 2, 1, 0]})


@pytest.mark.parametrize("kind", ["qwen2", "qwen3"])
def test_dropped_rows_on_other_architectures(models, tok, kind):
    model = models[kind]
    prompts = _random_prompts(9, model.config.vocab_size, seed=3)
    _check_decode(model, prompts, tok.pad_token_id, steps=12, chunk=3, drops={4: [0, 2, 3, 7, 8], 8: [8, 2]})


# --- padded row counts -------------------------------------------------------------------------


def test_padded_rows_table():
    table = {1: 1, 2: 2, 3: 4, 4: 4, 5: 8, 8: 8, 9: 16, 16: 16, 17: 32, 33: 48}
    assert {m: _padded_rows(m) for m in table} == table
    idx = torch.tensor([5, 2, 7])
    assert _pad_index(idx).tolist() == [5, 2, 7, 5]  # repeats the first row
    assert _pad_index(torch.tensor([4, 1])).tolist() == [4, 1]


def test_padding_rows_do_not_change_the_live_rows(models, tok, monkeypatch):
    """3 rows computed in a 4-row padded batch give the logits of the same 3 rows computed alone."""
    model = models["llama"]
    prompts = _random_prompts(3, model.config.vocab_size, seed=21)
    g = torch.Generator().manual_seed(0)
    toks = [torch.randint(3, model.config.vocab_size, (3,), generator=g) for _ in range(8)]

    def run():
        fd, _, pos = _prefill(model, prompts, tok.pad_token_id, chunk=4)
        return fd, torch.stack([fd.step(t, pos + i) for i, t in enumerate(toks)])  # (8, 3, V)

    padded_fd, padded = run()
    assert padded_fd.mask.shape[0] == 4 and padded_fd.keys[0].shape[0] == 4
    monkeypatch.setattr(decode, "_padded_rows", lambda m: m)
    alone_fd, alone = run()
    assert alone_fd.mask.shape[0] == 3
    torch.testing.assert_close(padded, alone, atol=1e-5, rtol=1e-5)


# --- the engine with and without the fast path ------------------------------------------------


def _tokens(model, tok, prompts, params, fast, seeds=None, **kw):
    eng = HFGenerateEngine(model, tok, fast_decode=fast, **kw)
    return [c.token_ids for c in eng.generate(prompts, params, seeds=seeds)]


def _frequent_midway_token(outs, exclude):
    """A token that some greedy rows emit after their first step and others never: as EOS, some
    rows stop early and some run to the end."""
    counts: dict[int, int] = {}
    for o in outs:
        for v in set(o[1:]):
            counts[v] = counts.get(v, 0) + 1
    for v, n in sorted(counts.items(), key=lambda kv: -kv[1]):
        if v not in exclude and 0 < n < len(outs) and all(v != o[0] for o in outs):
            return v
    return None


@pytest.mark.parametrize("kind", ["llama", "qwen2", "qwen3"])
def test_engine_greedy_and_seeded_sampling_same_tokens_with_and_without_fast_path(models, tok, kind, monkeypatch):
    model = models[kind]
    vocab = model.config.vocab_size
    prompts = [p for p in _random_prompts(5, vocab, seed=7, hi=7) for _ in range(2)] + [[5, 6]]  # 11 rows, repeats
    greedy = SamplingParams(do_sample=False, max_new_tokens=16)
    slow = _tokens(model, tok, prompts, greedy, False, max_batch_size=16)
    # an EOS that stops some rows midway: finished rows leave the fast decoder's batch
    eos = _frequent_midway_token(slow, {tok.eos_token_id})
    assert eos is not None
    monkeypatch.setattr(model.generation_config, "eos_token_id", [tok.eos_token_id, eos])
    for share in (True, False):
        slow = _tokens(model, tok, prompts, greedy, False, max_batch_size=16, share_prompts=share)
        fast = _tokens(model, tok, prompts, greedy, True, max_batch_size=16, share_prompts=share)
        assert fast == slow
    lengths = {len(o) for o in slow}
    assert min(lengths) < 16 and max(lengths) == 16  # some rows stopped early, others did not
    assert fast == _tokens(model, tok, prompts, greedy, None, max_batch_size=16)  # auto: on, on a CPU
    sampled = SamplingParams(temperature=1.0, top_p=0.9, max_new_tokens=16)
    seeds = list(range(100, 100 + len(prompts)))
    slow = _tokens(model, tok, prompts, sampled, False, seeds=seeds, max_batch_size=6)
    fast = _tokens(model, tok, prompts, sampled, True, seeds=seeds, max_batch_size=6)
    assert fast == slow
    assert len({tuple(o) for o in fast}) > len(fast) // 2  # the samples are not all alike


def test_engine_uses_the_fast_decoder_when_asked(models, tok, monkeypatch):
    """fast_decode True/None on a CPU builds a FastDecoder, False never does."""
    model = models["llama"]
    made = []
    real = decode.FastDecoder

    def spy(m, *a, **k):
        made.append(m)
        return real(m, *a, **k)

    monkeypatch.setattr("tagrpo.rollout.hf.FastDecoder", spy)
    p = SamplingParams(do_sample=False, max_new_tokens=3)
    for fast, n in ((False, 0), (True, 1), (None, 2)):
        HFGenerateEngine(model, tok, fast_decode=fast).generate([[4, 5, 6]], p)
        assert len(made) == n


# --- what stays on transformers' forward --------------------------------------------------------


def _gpt2(tok):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=len(tok), n_embd=32, n_layer=2, n_head=2, n_positions=256,
                     eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id, pad_token_id=tok.pad_token_id)
    return GPT2LMHeadModel(cfg).eval()


def _lora(model):
    from peft import LoraConfig, get_peft_model

    peft_model = get_peft_model(copy.deepcopy(model), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # lora_B starts at zero: make the adapter change the outputs
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
    return peft_model.eval()


UNSUPPORTED = {
    "lora": (lambda tok, m: _lora(m["llama"]), "PEFT"),
    "gpt2": (lambda tok, m: _gpt2(tok), "model_type 'gpt2'"),
    "gelu": (lambda tok, m: _perturb(_gelu_llama(tok), 0), "hidden_act"),
    "mistral_window": (lambda tok, m: _build("mistral", tok, sliding_window=4), "sliding-window"),
    "qwen2_window": (lambda tok, m: _build("qwen2", tok, use_sliding_window=True, sliding_window=4,
                                           max_window_layers=0), "sliding-window"),
}


def _gelu_llama(tok):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(**_config_kwargs(tok), hidden_act="gelu"))


@pytest.mark.parametrize("case", sorted(UNSUPPORTED))
def test_unsupported_models_keep_transformers_forward(models, tok, case):
    make, words = UNSUPPORTED[case]
    model = make(tok, models)
    reason = unsupported_reason(model)
    assert reason is not None and words in reason
    with pytest.raises(ValueError, match="FastDecoder does not cover"):
        FastDecoder(model)
    # prompts of 1-3 tokens and 10 new ones: decoding runs past the 4-token windows (where a
    # fast path that ignored the window would not crash but give other tokens)
    prompts = [p for p in _random_prompts(3, len(tok), seed=2, hi=3) for _ in range(2)]
    greedy = SamplingParams(do_sample=False, max_new_tokens=10)
    assert _tokens(model, tok, prompts, greedy, True) == _tokens(model, tok, prompts, greedy, False)


def test_lora_base_model_and_adapted_projections_are_not_covered(models):
    """The transformers model inside a PEFT wrapper (LoRA layers in place of q_proj/v_proj), and a
    model with one projection that is an nn.Linear subclass (its forward may differ)."""
    assert unsupported_reason(_lora(models["llama"]).get_base_model()) is not None

    class Adapted(torch.nn.Linear):
        def forward(self, x):
            return super().forward(x) * 2

    model = copy.deepcopy(models["llama"])
    old = model.model.layers[1].mlp.up_proj
    model.model.layers[1].mlp.up_proj = Adapted(old.in_features, old.out_features, bias=False)
    reason = unsupported_reason(model)
    assert reason is not None and "not plain nn.Linear" in reason


def test_sliding_window_that_no_layer_uses_is_covered(tok):
    """Qwen2 with use_sliding_window but max_window_layers = all layers: every layer is full
    attention, so the fast path runs and still matches."""
    model = _build("qwen2", tok, seed=5, use_sliding_window=True, sliding_window=4, max_window_layers=2)
    assert unsupported_reason(model) is None
    _check_decode(model, _random_prompts(3, len(tok), seed=4), tok.pad_token_id, steps=10, chunk=4)


def test_sliding_window_is_not_silently_ignored(tok):
    """A Mistral window shorter than the sequence changes the logits: the fast path must not run
    there (it attends to the whole cache)."""
    model = _build("mistral", tok, seed=6, sliding_window=4)
    assert unsupported_reason(model) is not None
    prompts = _random_prompts(2, len(tok), seed=1)
    full = _build("mistral", tok, seed=6)  # same weights, no window
    torch.testing.assert_close(dict(full.named_parameters())["lm_head.weight"],
                               dict(model.named_parameters())["lm_head.weight"])
    assert not torch.allclose(_reference_logits(model, prompts, tok.pad_token_id),
                              _reference_logits(full, prompts, tok.pad_token_id), atol=1e-3)


# --- the bf16 rollout copy ---------------------------------------------------------------------


def _greedy_gaps(model, prompts, outs):
    """Per row, the largest gap between the best logit and the chosen token's logit over its
    steps, under the model's own full forward on prompt + tokens (0: every token an argmax)."""
    gaps = []
    with torch.no_grad():
        for p, o in zip(prompts, outs):
            z = model(input_ids=torch.tensor([p + o])).logits[0, len(p) - 1 : len(p) - 1 + len(o)].float()  # (len(o), V)
            gaps.append(max(float(z[i].max() - z[i, t]) for i, t in enumerate(o)))
    return gaps


@pytest.mark.parametrize("kind", ["llama", "qwen3"])
def test_bf16_rollout_copy_runs_the_fast_path(models, tok, kind):
    """The bf16 copy decodes on the fast path, greedily: every token is the argmax of the bf16
    model's own forward up to bf16 rounding (this tiny model's logits, |z| < 1, tie exactly in bf16
    at some steps, and transformers' decode and the fast decoder may break a tie differently, so
    the two engines' tokens are not compared with each other; both are checked the same way)."""
    model = copy.deepcopy(models[kind])
    prompts = [p for p in _random_prompts(4, len(tok), seed=8) for _ in range(2)]
    greedy = SamplingParams(do_sample=False, max_new_tokens=12)
    eng = HFGenerateEngine(model, tok, dtype="bf16", fast_decode=True)
    fast = [c.token_ids for c in eng.generate(prompts, greedy)]
    assert eng._fast_decoder(eng._copy) is not None
    assert all(p.dtype == torch.float32 for p in model.parameters())
    slow = _tokens(model, tok, prompts, greedy, False, dtype="bf16")
    ref = copy.deepcopy(model).to(torch.bfloat16)
    assert max(_greedy_gaps(ref, prompts, fast)) <= 1e-2, fast
    assert max(_greedy_gaps(ref, prompts, slow)) <= 1e-2, slow
    assert [f[:2] for f in fast] == [s[:2] for s in slow]


# ------------------------------------------------------------------ bf16 weights packed for oneDNN
def _bf16(model):
    m = copy.deepcopy(model)
    for p in m.parameters():
        p.data = p.data.to(torch.bfloat16)
    return m.eval()


def test_packing_applies_only_to_bf16_weights_on_a_cpu(models):
    assert not packing.can_pack(models["llama"])  # fp32: plain products, nothing packed
    assert packing.pack_linears(models["llama"]) == {}


needs_onednn_bf16 = pytest.mark.skipif(not packing.can_pack(torch.nn.Linear(2, 2).to(torch.bfloat16)),
                                       reason="this CPU's oneDNN has no bf16 kernels (no bf16 units)")


@needs_onednn_bf16
@pytest.mark.parametrize("kind", ["llama", "qwen2"])  # qwen2: q/k/v biases
def test_packed_products_equal_plain_bf16_products_bit_for_bit(models, kind):
    """Every projection and the lm_head is packed once; a layer's q|k|v and gate|up as one
    product each, whose columns equal each projection's own product bit for bit."""
    import torch.nn.functional as F

    model = _bf16(models[kind])
    packed = packing.pack_linears(model, rows=16)
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert sorted(map(id, packing.packed_modules(packed))) == sorted(map(id, linears))  # each once
    layers = model.model.layers
    assert set(packed) == {id(m) for layer in layers for m in (layer.self_attn, layer.mlp, layer.self_attn.o_proj,
                                                               layer.mlp.down_proj)} | {id(model.lm_head)}
    fd = FastDecoder(model, packed=packed)
    g = torch.Generator().manual_seed(0)
    for rows in (1, 3, 8, 16, 33):
        x = torch.randn(rows, model.config.hidden_size, generator=g).to(torch.bfloat16)
        for layer in layers:
            a, mlp = layer.self_attn, layer.mlp
            assert torch.equal(fd._fused(x, a), torch.cat([F.linear(x, m.weight, m.bias) for m in (a.q_proj, a.k_proj, a.v_proj)], 1))
            assert torch.equal(fd._fused(x, mlp), torch.cat([F.linear(x, m.weight) for m in (mlp.gate_proj, mlp.up_proj)], 1))
            for m in (a.o_proj, mlp.down_proj):
                xi = torch.randn(rows, m.in_features, generator=g).to(torch.bfloat16)
                assert torch.equal(fd._linear(xi, m), F.linear(xi, m.weight, m.bias))
        assert torch.equal(fd._linear(x, model.lm_head), F.linear(x, model.lm_head.weight))


@needs_onednn_bf16
@pytest.mark.parametrize("kind", ["llama", "qwen2", "qwen3"])
def test_bf16_packed_step_matches_the_models_bf16_forward(models, tok, kind, monkeypatch):
    """The bf16 decode step as the engine runs it (packed and fused products, rotation of q and
    k together, attention over the whole buffer): every step's logits equal transformers' bf16
    forward up to bf16 rounding (2e-2), with growth and dropped rows, and the
    attention reads the buffer's full width (fp32 reads a bucketed width: the test above)."""
    import tagrpo.rollout.decode as D

    widths, caps = [], []
    real = D.F.softmax

    def spy(x, *a, **k):
        widths.append(x.shape[-1])
        return real(x, *a, **k)

    monkeypatch.setattr(D.F, "softmax", spy)
    model = _bf16(models[kind])
    prompts = _random_prompts(6, model.config.vocab_size, seed=9)
    packed = packing.pack_linears(model, rows=16)
    real_step = FastDecoder.step

    def step_spy(self, *a, **kw):
        caps.append(self.keys[0].shape[2] if self.length < self.keys[0].shape[2] else self.keys[0].shape[2] + self.chunk)
        return real_step(self, *a, **kw)

    monkeypatch.setattr(FastDecoder, "step", step_spy)
    _check_decode(model, prompts, tok.pad_token_id, steps=14, chunk=5, drops={7: [4, 2, 0]}, packed=packed,
                  atol=2e-2, rtol=2e-2)
    n_layers = model.config.num_hidden_layers
    assert widths == [c for c in caps for _ in range(n_layers)]  # every layer of every step: the whole buffer
    assert len(set(widths)) == 3  # 14 steps, chunk 5: two growths
@needs_onednn_bf16
def test_engine_packs_for_a_bf16_call_uses_the_packed_weights_and_frees_them(models, tok, monkeypatch):
    model = copy.deepcopy(models["llama"])
    prompts = _random_prompts(6, model.config.vocab_size, seed=5)
    params = SamplingParams(temperature=1.0, max_new_tokens=12)
    seeds = list(range(len(prompts)))
    used = []
    ns = torch.ops.mkldnn
    real = ns._linear_pointwise

    class Spy:  # torch.ops entries cannot be patched one by one; count calls through a stand-in namespace
        def __getattr__(self, name):
            return getattr(ns, name)

        def _linear_pointwise(self, *a):
            used.append(1)
            return real(*a)

    monkeypatch.setattr(decode.torch.ops, "mkldnn", Spy(), raising=False)
    packed_eng = HFGenerateEngine(model, tok, dtype="bf16")
    plain_eng = HFGenerateEngine(model, tok, dtype="bf16", prepack=False)
    a = packed_eng.generate(prompts, params, seeds=seeds)
    n_packed = len(used)
    b = plain_eng.generate(prompts, params, seeds=seeds)
    assert n_packed > 0 and len(used) == n_packed  # only the packing engine ran packed products
    assert packed_eng._packed == {}  # freed at the end of the call
    assert len(a) == len(b) and all(0 < len(c.token_ids) <= 12 for c in a)


@needs_onednn_bf16
def test_lean_engine_frees_the_copys_packed_weights_for_the_decode_steps_and_samples_the_same(models, tok, monkeypatch):
    """HFGenerateEngine(lean=True) (the trainer's lean CPU memory): once a call's last batch is
    prefilled, the bf16 copy's projection weights are freed (the decode steps read their packed
    form); earlier batches still prefill with them, the embedding stays, the caller's model is
    never touched, the next call casts them again, and every token equals a non-lean engine's."""
    model = copy.deepcopy(models["llama"])
    prompts = [p for p in _random_prompts(5, model.config.vocab_size, seed=6) for _ in range(2)]  # 10 rows
    params = SamplingParams(temperature=1.0, max_new_tokens=10)
    seeds = list(range(len(prompts)))
    lean = HFGenerateEngine(model, tok, dtype="bf16", max_batch_size=4, lean=True)  # 3 batches
    kept = HFGenerateEngine(model, tok, dtype="bf16", max_batch_size=4)
    q_sizes = []
    real_step = FastDecoder.step

    def spy(self, *a, **kw):
        if self.model is lean._copy:
            layer = self.model.model.layers[0]
            q_sizes.append((layer.self_attn.q_proj.weight.numel(), self.model.model.embed_tokens.weight.numel()))
        return real_step(self, *a, **kw)

    monkeypatch.setattr(FastDecoder, "step", spy)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    for call in range(2):
        a = lean.generate(prompts, params, seeds=seeds)
        b = kept.generate(prompts, params, seeds=seeds)
        assert [c.token_ids for c in a] == [c.token_ids for c in b]
        assert lean._copy.model.layers[0].mlp.down_proj.weight.numel() == 0  # freed until the next call
        assert kept._copy.model.layers[0].mlp.down_proj.weight.numel() > 0
        with torch.no_grad():  # the next call must cast the changed weights again
            for p in model.parameters():
                p.add_(0.01)
    emb = model.model.embed_tokens.weight.numel()
    sizes = set(q_sizes)
    assert (0, emb) in sizes  # the last batch decodes on the packed form alone, the embedding kept
    assert any(q > 0 for q, _ in sizes)  # earlier batches still held (and prefilled with) the weights
    for n, p in model.named_parameters():  # only the engine's copy was freed
        torch.testing.assert_close(p, before[n] + 0.02, msg=n)
    own = _bf16(models["llama"])  # a bf16 model sampled in place (no copy): nothing is freed
    HFGenerateEngine(own, tok, dtype="fp32", lean=True).generate(prompts[:2], params, seeds=seeds[:2])
    assert all(p.numel() > 0 for p in own.parameters())


@needs_onednn_bf16
def test_lean_engine_with_one_batch_frees_each_weight_as_soon_as_it_is_packed(models, tok, monkeypatch):
    """With one batch (the demo's rollout), the lean engine packs after the prefill and frees each
    bf16 projection weight of its copy right after packing it, so the copy and the packed form
    never both exist whole (the rollout's memory peak); the tokens equal a non-lean engine's."""
    import tagrpo.rollout.hf as hf

    model = copy.deepcopy(models["llama"])
    prompts = [p for p in _random_prompts(3, model.config.vocab_size, seed=8) for _ in range(2)]  # 6 rows, 1 batch
    params = SamplingParams(temperature=1.0, max_new_tokens=8)
    seeds = list(range(len(prompts)))
    lean = HFGenerateEngine(model, tok, dtype="bf16", max_batch_size=8, lean=True)
    kept = HFGenerateEngine(model, tok, dtype="bf16", max_batch_size=8)

    def projections(m):  # the decode step's projections, as pack_linears lists them
        return [decode._get(layer, n) for layer in m.model.layers for n in decode._LAYER_PARTS if n.endswith("_proj")]

    alive = []  # projection weights of the copy still held after each packed module
    real = hf.pack_linears

    def spy(m, rows=16, release=None):
        if m is lean._copy:
            assert release is not None

            def counted(mod):
                release(mod)
                alive.append(sum(p.weight.numel() > 0 for p in projections(m)))

            return real(m, rows, counted)
        return real(m, rows, release)

    monkeypatch.setattr(hf, "pack_linears", spy)
    a = lean.generate(prompts, params, seeds=seeds)
    b = kept.generate(prompts, params, seeds=seeds)
    assert [c.token_ids for c in a] == [c.token_ids for c in b]
    n = len(projections(model))
    assert alive == [*range(n - 1, -1, -1), 0]  # one freed per packed projection, then the lm_head
    assert lean._copy.model.embed_tokens.weight.numel() > 0  # the embedding (tied lm_head or not) stays
