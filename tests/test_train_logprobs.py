"""Chunked response log-probs (`tagrpo.train.logprobs`) against the plain full-logits computation:
same values, same entropies, same gradients, for every forward (plain, shared prefix) and
output layer (plain Linear, with bias, any module), with and without bf16 autocast."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tagrpo.models.tiny import make_tiny_model
from tagrpo.rollout import batching
from tagrpo.train import logprobs as L


def _reference(head, hidden, target, temperature, autocast):
    with L.autocast_ctx(hidden.device, autocast):
        z = head(hidden)
    z = z.float() / temperature  # (b, T, V)
    logp = torch.log_softmax(z, -1).gather(-1, target.unsqueeze(-1)).squeeze(-1)  # (b, T)
    p = torch.softmax(z, -1)
    ent = -(p * torch.log_softmax(z, -1)).sum(-1)
    return logp, ent


class Wrapped(nn.Module):  # an output layer that is not a plain nn.Linear (the generic path)
    def __init__(self, lin):
        super().__init__()
        self.inner = lin
        self.weight = lin.weight

    def forward(self, h):
        return self.inner(h)


@pytest.mark.parametrize("autocast", [False, True])
@pytest.mark.parametrize("kind", ["linear", "bias", "generic"])
@pytest.mark.parametrize("chunk", [3, 0])
def test_chunked_logprobs_equal_full_logits_in_value_entropy_and_gradient(kind, autocast, chunk):
    torch.manual_seed(0)
    b, t, h, v = 3, 5, 8, 37
    head = nn.Linear(h, v, bias=kind == "bias")
    if kind == "generic":
        head = Wrapped(head)
    hidden = torch.randn(b, t, h, requires_grad=True)
    target = torch.randint(0, v, (b, t))
    g = torch.randn(b, t)  # an arbitrary upstream gradient
    grads = []
    for fn in ("ref", "chunked"):
        head.zero_grad()
        hidden.grad = None
        if fn == "ref":
            logp, ent = _reference(head, hidden, target, 0.7, autocast)
        else:
            logp, ent = L.chunked_logprobs(head, hidden, target, temperature=0.7, autocast=autocast, want_entropy=True, chunk=chunk)
        (logp * g).sum().backward()
        grads.append((logp.detach(), ent.detach(), hidden.grad.clone(), *[p.grad.clone() for p in head.parameters()]))
    tol = dict(atol=2e-2, rtol=2e-2) if autocast else dict(atol=1e-5, rtol=1e-5)
    for a, c in zip(grads[0], grads[1]):
        torch.testing.assert_close(c, a, **tol)


@pytest.mark.parametrize("autocast", [False, True])
def test_backward_tiles_over_several_token_blocks_give_the_same_gradients(autocast, monkeypatch):
    """The backward's (tokens x vocabulary) tiles: with token blocks of 4 rows and vocabulary
    slices of a few words (every tile boundary crossed, targets in every slice), the same
    gradients as one block (and as the full-logits reference, tested above)."""
    torch.manual_seed(2)
    head = nn.Linear(8, 37, bias=True)
    hidden = torch.randn(3, 5, 8, requires_grad=True)
    target = torch.randint(0, 37, (3, 5))
    g = torch.randn(3, 5)
    out = []
    for block in (4096, 4):
        monkeypatch.setattr(L, "BLOCK_TOKENS", block)
        head.zero_grad()
        hidden.grad = None
        logp, _ = L.chunked_logprobs(head, hidden, target, temperature=0.7, autocast=autocast, chunk=3)
        (logp * g).sum().backward()
        out.append((hidden.grad.clone(), head.weight.grad.clone(), head.bias.grad.clone()))
    tol = dict(atol=1e-2, rtol=1e-2) if autocast else dict(atol=1e-6, rtol=1e-5)
    for a, b in zip(*out):
        torch.testing.assert_close(b, a, **tol)


@pytest.mark.parametrize("autocast", [False, True])
def test_chunked_logprobs_into_grad_adds_the_weight_gradient_to_an_existing_grad(autocast):
    """into_grad=True (the trainer's flat gradient buffer): the weight's gradient is added into
    the .grad that is already there, in place, without a (V, H) gradient passed to autograd (so
    no hook on the weight sees it), and equals what autograd adds without it; with no .grad
    yet it is returned as usual."""
    torch.manual_seed(1)
    head = nn.Linear(8, 37, bias=True)
    hidden = torch.randn(2, 6, 8, requires_grad=True)
    target = torch.randint(0, 37, (2, 6))
    g = torch.randn(2, 6)
    start = torch.randn(37, 8)  # an earlier micro-batch's gradient already in the buffer
    out = {}
    for into in (False, True):
        head.weight.grad = start.clone()
        head.bias.grad = None
        buf = head.weight.grad
        through_autograd = []
        hook = head.weight.register_hook(lambda grad: through_autograd.extend([] if grad is None else [tuple(grad.shape)]))
        logp, _ = L.chunked_logprobs(head, hidden, target, temperature=0.7, autocast=autocast, chunk=4, into_grad=into)
        (logp * g).sum().backward()
        hook.remove()
        assert head.weight.grad is buf  # accumulated in place either way (autograd adds into an existing grad)
        assert through_autograd == ([] if into else [(37, 8)])  # into_grad: no (V, H) gradient handed to autograd
        out[into] = (head.weight.grad.clone(), head.bias.grad.clone())
    tol = dict(atol=1e-2, rtol=1e-2) if autocast else dict(atol=1e-6, rtol=1e-5)
    for a, b in zip(out[False], out[True]):
        torch.testing.assert_close(b, a, **tol)
    head.weight.grad = None  # no buffer yet: returned to autograd, which stores it
    logp, _ = L.chunked_logprobs(head, hidden, target, temperature=0.7, autocast=autocast, chunk=4, into_grad=True)
    (logp * g).sum().backward()
    torch.testing.assert_close(head.weight.grad + start, out[False][0], **tol)


def test_chunked_logprobs_need_no_full_logits_tensor():
    """The forward keeps nothing of size (N, V) for backward: only hidden, weight, lse."""
    hidden = torch.randn(2, 64, 8, requires_grad=True)
    head = nn.Linear(8, 1000, bias=False)
    saved = []

    def pack(x):
        saved.append(x.numel())
        return x

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        logp, _ = L.chunked_logprobs(head, hidden, torch.zeros(2, 64, dtype=torch.long), chunk=16)
    assert max(saved) < 2 * 64 * 1000 // 4, saved


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    model, tok = make_tiny_model(seed=1)
    return model, tok


@pytest.mark.parametrize("shared", [False, True, "packed"])
@pytest.mark.parametrize("autocast", [False, True])
def test_response_logprobs_chunked_equal_full_logits_with_and_without_shared_prefix(tiny, shared, autocast):
    model, tok = tiny
    prompts = [[5, 6, 7], [5, 6, 7], [9, 10, 11, 12, 13], [5, 6, 7]]
    responses = [[20, 21, 22], [23], [24, 25, 26, 27, 28], [29, 30]]
    out = []
    for chunked in (False, True):
        model.zero_grad()
        logp, mask, ent = L.response_logprobs(model, prompts, responses, pad_id=0, device=torch.device("cpu"),
                                              temperature=0.9, autocast=autocast, shared_prefix=bool(shared),
                                              packed=shared == "packed", want_entropy=True, chunked=chunked)
        (logp * mask).sum().backward()
        out.append(((logp * mask).detach(), (ent * mask).detach(),
                    {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
    tol = dict(atol=3e-2, rtol=3e-2) if autocast else dict(atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(out[1][0], out[0][0], **tol)
    torch.testing.assert_close(out[1][1], out[0][1], **tol)
    assert out[0][2].keys() == out[1][2].keys()
    for n in out[0][2]:
        scale = float(out[0][2][n].abs().max()) + 1e-12
        torch.testing.assert_close(out[1][2][n] / scale, out[0][2][n] / scale, atol=tol["atol"], rtol=0, msg=n)


def test_head_check_accepts_plain_heads_and_restores_the_output_layer(tiny):
    model, _ = tiny
    head = model.get_output_embeddings()
    assert L.head_is_plain(model)
    assert model.get_output_embeddings() is head


@pytest.mark.parametrize("shared", [False, True, "packed"])
@pytest.mark.parametrize("autocast", [False, True])
def test_bf16_cpu_update_rounds_widths_and_chunk_rows_to_a_multiple_of_16(tiny, autocast, shared, monkeypatch):
    """bf16 on a CPU, every forward's width (plain: prompt + response; shared prefix: the prompts,
    then the responses) and every lm_head chunk's row count are multiples of 16 (oneDNN keeps a
    kernel per shape: unrounded shapes grow the heap every step); the log-probs, entropies and
    gradients are those of the unrounded computation. fp32: widths as they are."""
    model, _ = tiny
    prompts = [[5, 6, 7], [9, 10, 11, 12, 13], [5, 6, 7]]
    responses = [[20, 21, 22], [24, 25, 26, 27, 28, 29, 30], [29, 30]]
    widths, rows = [], []
    monkeypatch.setattr(L.packed_prefix, "blocks_per_row", lambda *a, **kw: 99)  # packed: all of a prompt's responses in one row
    hook = model.register_forward_pre_hook(lambda m, a, kw: widths.append(kw["input_ids"].shape[1]), with_kwargs=True)
    real_logits = L._logits
    monkeypatch.setattr(L, "_logits", lambda h, *a: rows.append(h.shape[0]) or real_logits(h, *a))
    out = {}
    try:
        for mult in (1, 16):
            monkeypatch.setattr(batching, "CPU_BF16_WIDTH_MULTIPLE", mult)
            widths.clear()
            rows.clear()
            model.zero_grad()
            logp, mask, ent = L.response_logprobs(model, prompts, responses, pad_id=0, device=torch.device("cpu"),
                                                  temperature=0.9, autocast=autocast, want_entropy=True,
                                                  shared_prefix=bool(shared), packed=shared == "packed")
            (logp * mask).sum().backward()
            assert logp.shape == mask.shape == (3, 7)
            out[mult] = ((logp * mask).detach(), (ent * mask).detach(),
                         {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
            # packed: one row a prompt, its prompt then 2 response blocks (the first prompt has 2)
            if mult == 16 and autocast:
                want = {False: [16], True: [16, 16], "packed": [16 + 2 * 16]}[shared]
                assert widths == want and rows and all(r % 16 == 0 for r in rows), (widths, rows)
            else:  # the longest prompt, then the longest response; plain: both in one row
                assert widths == {False: [5 + 7], True: [5, 7], "packed": [5 + 2 * 7]}[shared], widths
    finally:
        hook.remove()
    tol = dict(atol=3e-2, rtol=3e-2) if autocast else dict(atol=0, rtol=0)
    torch.testing.assert_close(out[16][0], out[1][0], **tol)
    torch.testing.assert_close(out[16][1], out[1][1], **tol)
    for n in out[1][2]:
        scale = float(out[1][2][n].abs().max()) + 1e-12
        torch.testing.assert_close(out[16][2][n] / scale, out[1][2][n] / scale, atol=tol["atol"], rtol=0, msg=n)
