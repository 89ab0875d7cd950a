"""The PPO update on a step's responses: old / reference / current log-probs, the clipped
surrogate, gradient accumulation over micro-batches, AdamW. Returns its metrics.

TA-GRPO differs from GRPO here only in the rows it is given: every row's prompt is q0
(`batch.training_prompt`), so old, reference and current log-probs are all anchored.

- Mini-batches hold whole families; each is one optimizer step, `ppo_epochs` passes over them.
- Each micro-batch's loss is scaled by its share of the mini-batch (tokens for token-mean,
  sequences otherwise), so the gradient does not depend on how rows are packed; the logged
  `loss/policy`, `loss/kl` and `loss/total` use the same weights, so they do not either.
  `loss/clipfrac*`, `loss/approx_kl` and `loss/ratio_mean` are token means over the rows that
  ran forward/backward.
- With beta = 0 a zero-advantage row adds exactly nothing to the gradient: it is not run (but
  its tokens stay in the normalizer), so uniform groups cost nothing to train.
- A non-finite loss or gradient skips the optimizer step on every process (decided together).
- The LR scheduler steps `ppo_epochs * num_mini_batches` times per train step whatever happens
  (no rows, fewer families than mini-batches), so the schedule ends where it was sized to.
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass, field

import torch

from tagrpo.rollout.batching import width_multiple
from tagrpo.train import logprobs as lp
from tagrpo.train import packed_prefix, packing
from tagrpo.train.batch import Sample, training_prompt
from tagrpo.train.config import TrainConfig
from tagrpo.train.metrics import anchoring_metrics

RATE_KEYS = ("loss/clipfrac", "loss/clipfrac_low", "loss/clipfrac_high", "loss/approx_kl", "loss/ratio_mean")
LOSS_KEYS = ("loss/policy", "loss/kl", "loss/total")


@dataclass
class Learner:
    """What the update works on: the (possibly DDP-wrapped) policy, its optimizer and schedule,
    the reference model (None: no KL, or LoRA with the adapter disabled), the device, and how
    log-probs are computed."""

    model: object
    optimizer: object
    scheduler: object
    device: torch.device
    pad_id: int
    ref_model: object = None
    accelerator: object = None
    autocast: bool = False
    shared_prefix: bool = True
    packed_prefix: bool = False  # the shared prefix as one block-masked forward (gradient checkpointing, DDP)
    chunked: bool = True
    flat_grads: bool = False  # gradients are views of one buffer outside the heap, freed before each rollout
    trim_heap: bool = False  # give the heap's free pages back after each micro-batch's backward (glibc)
    grad_buffers: list | None = field(default=None, init=False, repr=False)  # with flat_grads: one per dtype

    def zero_grad(self) -> None:
        """Clear the gradients before a mini-batch. With `flat_grads` the parameters' `.grad` are
        views of one flat buffer per dtype in its own anonymous memory map (tagrpo._malloc.
        mapped_zeros), allocated at the update's first call and zeroed in place after (autograd
        accumulates into an existing `.grad` in place); otherwise they are set to None and
        reallocated by the next backward. On a CPU whose allocator keeps freed memory in the
        process, reallocating 4 bytes a parameter on the heap every step fragments it (measured:
        +0.5 GB resident after the second step of the demo); a memory map goes back to the system
        whole when `release_grads` frees it, so the rollout runs without the gradients."""
        if not self.flat_grads:
            self.optimizer.zero_grad(set_to_none=True)
            return
        params = [p for g in self.optimizer.param_groups for p in g["params"] if p.requires_grad]
        bufs = self.grad_buffers
        if bufs is None or any(p.grad is None for p in params):  # first call, or someone set a grad to None
            from tagrpo._malloc import mapped_zeros

            by_dtype: dict = {}
            for p in params:
                by_dtype.setdefault((p.dtype, p.device), []).append(p)
            bufs = []
            for (dtype, device), ps in by_dtype.items():
                n = sum(p.numel() for p in ps)
                buf = mapped_zeros(n, dtype) if device.type == "cpu" else torch.zeros(n, dtype=dtype, device=device)  # (n,)
                off = 0
                for p in ps:
                    p.grad = buf[off : off + p.numel()].view_as(p)
                    off += p.numel()
                bufs.append(buf)
            self.grad_buffers = bufs
            return
        for buf in bufs:
            buf.zero_()

    def release_grads(self) -> None:
        """Free the last update's gradients (kept after it for inspection) before a rollout; with
        `flat_grads` their buffers are unmapped."""
        self.optimizer.zero_grad(set_to_none=True)
        self.grad_buffers = None

    @property
    def world(self) -> int:
        return self.accelerator.num_processes if self.accelerator is not None else 1

    def global_sum(self, x: float) -> float:
        if self.world == 1:
            return float(x)
        t = torch.tensor([float(x)], dtype=torch.float64, device=self.device)
        return float(self.accelerator.reduce(t, reduction="sum").item())

    def shares_prefix(self, model) -> bool:
        """Whether a forward of `model` now shares its prompts: the block-masked form needs an
        attention kernel that takes a custom mask (otherwise full rows)."""
        return self.shared_prefix and (not self.packed_prefix or packed_prefix.supported(model))

    def base(self):
        return self.accelerator.unwrap_model(self.model) if self.accelerator is not None else self.model

    def backward(self, loss: torch.Tensor) -> None:
        """Backward through the accelerator (DDP averages gradients over ranks, hence x world)."""
        if self.accelerator is None:
            loss.backward()
        else:
            self.accelerator.backward(loss * self.world)
        if self.trim_heap:
            from tagrpo._malloc import release_free_memory

            release_free_memory()


@dataclass
class UpdateResult:
    metrics: dict
    logp: dict = field(default_factory=dict)  # row -> current log-probs (T_i,) at the first epoch
    old: dict | None = None  # row -> old-policy log-probs, when stored (ppo_epochs > 1 or several mini-batches)
    ref: dict | None = None  # row -> reference log-probs (beta > 0)
    nonfinite_skips: int = 0
    computed_tokens: dict = field(default_factory=lambda: {"fwd_bwd": 0, "fwd": 0})


def _forward(learner: Learner, model, rows, mb, cfg: TrainConfig, want_entropy: bool, counter: dict):
    prompts = [rows[i][0] for i in mb]
    responses = [rows[i][1] for i in mb]
    shared = learner.shares_prefix(model)
    per_row = (packed_prefix.choose_per_row(model, prompts, responses, width_multiple(learner.device, learner.autocast))
               if shared and learner.packed_prefix else None)  # as the forward will choose it
    counter["fwd_bwd" if torch.is_grad_enabled() else "fwd"] += packing.computed_tokens(prompts, responses, shared, per_row)
    return lp.response_logprobs(model, prompts, responses, pad_id=learner.pad_id, device=learner.device,
                                temperature=cfg.temperature, autocast=learner.autocast, shared_prefix=shared,
                                packed=learner.packed_prefix, want_entropy=want_entropy, chunked=learner.chunked,
                                into_grad=learner.flat_grads)


def _no_grad_logprobs(learner: Learner, model, rows, batches, cfg, counter, disable_adapter: bool = False) -> dict:
    out: dict[int, torch.Tensor] = {}
    ctx = learner.base().disable_adapter() if disable_adapter else contextlib.nullcontext()
    with torch.no_grad(), ctx:
        for mb in batches:
            logp, _, _ = _forward(learner, model, rows, mb, cfg, False, counter)
            for k, i in enumerate(mb):
                out[i] = logp[k, : len(rows[i][1])].clone()
    return out


def _stack(values: list[torch.Tensor], t: int, device) -> torch.Tensor:
    out = torch.zeros((len(values), t), dtype=torch.float32, device=device)  # (b, T)
    for i, v in enumerate(values):
        out[i, : v.shape[0]] = v
    return out


def pack(rows, idx: list[int], budget: int, shared_prefix: bool) -> list[list[int]]:
    """Micro-batches of row indices within the token budget."""
    if not idx:
        return []
    if shared_prefix:
        return packing.pack_shared_prefix([r[0] for r in rows], [r[1] for r in rows], idx, budget)
    lengths = [(len(rows[i][0]), len(rows[i][1])) for i in idx]
    return [[idx[j] for j in b] for b in packing.pack_micro_batches(lengths, budget)]


def mini_batches(samples: list[Sample], n: int) -> list[list[int]]:
    """Row indices split into at most n mini-batches of whole families."""
    fams = sorted({s.family for s in samples})
    n = min(n, max(1, len(fams)))
    where = {f: k * n // max(1, len(fams)) for k, f in enumerate(fams)}
    return [[i for i, s in enumerate(samples) if where[s.family] == m] for m in range(n)]


def step_schedule(scheduler, times: int = 1) -> None:
    """Advance the LR schedule (also after a skipped optimizer step, without torch's warning)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step\\(\\)` before")
        for _ in range(times):
            scheduler.step()


def micro_weight(agg: str, n_tok: float, n_seq: int, tok_total: float, seq_total: float) -> float:
    """A micro-batch's share of its mini-batch loss: tokens for token-mean, sequences otherwise."""
    return n_tok / tok_total if agg == "token-mean" else n_seq / seq_total


def ppo_update(learner: Learner, samples: list[Sample], cfg: TrainConfig) -> UpdateResult:
    """Train on `samples` (already filtered, advantages set); returns metrics and log-probs."""
    from tagrpo import core

    rows = [(training_prompt(s, cfg.algorithm), s.response_ids, s.adv) for s in samples]
    res = UpdateResult(metrics={"train/rows": learner.global_sum(len(rows))})
    updates_per_step = cfg.ppo_epochs * cfg.num_mini_batches
    res.metrics["actor/lr"] = learner.scheduler.get_last_lr()[0]  # the rate of this step's first update
    if res.metrics["train/rows"] == 0:
        step_schedule(learner.scheduler, updates_per_step)
        res.metrics["train/skipped_empty"] = 1.0
        return res
    minis = mini_batches(samples, cfg.num_mini_batches)
    skip_zero = cfg.skip_zero_adv and cfg.beta == 0 and learner.world == 1  # every rank must run backward under DDP
    trained = [[i for i in mini if not (skip_zero and rows[i][2] == 0.0)] for mini in minis]
    packs = [pack(rows, t, cfg.micro_batch_tokens, learner.shares_prefix(learner.model)) for t in trained]
    all_batches = [b for pk in packs for b in pk]
    counter = res.computed_tokens
    if cfg.ppo_epochs > 1 or len(minis) > 1:
        res.old = _no_grad_logprobs(learner, learner.model, rows, all_batches, cfg, counter)
    if cfg.beta > 0:
        res.ref = (_no_grad_logprobs(learner, learner.model, rows, all_batches, cfg, counter, disable_adapter=True) if cfg.lora
                   else _no_grad_logprobs(learner, learner.ref_model, rows, all_batches, cfg, counter))
    params = [p for p in learner.model.parameters() if p.requires_grad]
    sums: dict[str, float] = {}
    rate_w = ent_sum = ent_w = 0.0
    grad_norms: list[float] = []
    n_updates = 0
    for epoch in range(cfg.ppo_epochs):
        for mini, batches in zip(minis, packs):
            tok_total = learner.global_sum(sum(len(rows[i][1]) for i in mini))
            seq_total = learner.global_sum(len(mini))
            learner.zero_grad()
            bad = False
            loss_sums = dict.fromkeys(LOSS_KEYS, 0.0)
            for b_i, mb in enumerate(batches):
                last = b_i == len(batches) - 1
                sync = contextlib.nullcontext() if (learner.world == 1 or last) else learner.accelerator.no_sync(learner.model)
                with sync:
                    logp, mask, ent = _forward(learner, learner.model, rows, mb, cfg, epoch == 0, counter)  # (b, T) each
                    t = logp.shape[1]
                    if epoch == 0:
                        for k, i in enumerate(mb):
                            res.logp[i] = logp[k, : len(rows[i][1])].detach().clone()
                    old = _stack([res.old[i] for i in mb], t, learner.device) if res.old is not None else logp.detach()  # (b, T)
                    ref = _stack([res.ref[i] for i in mb], t, learner.device) if res.ref is not None else None  # (b, T)
                    adv = torch.tensor([rows[i][2] for i in mb], dtype=torch.float32, device=learner.device)  # (b,)
                    loss, m = core.policy_loss(logp, old, adv, mask, clip_low=cfg.clip_low, clip_high=cfg.clip_high, agg=cfg.agg,
                                               ref_logp=ref, beta=cfg.beta, norm_len=cfg.max_new_tokens)
                    n_tok = float(mask.sum())
                    w = micro_weight(cfg.agg, n_tok, len(mb), tok_total, seq_total)
                    finite = bool(torch.isfinite(loss))
                    bad = bad or not finite  # backward still runs: under DDP every rank must; the step is skipped below
                    learner.backward(loss * w)
                if not finite:
                    continue
                for k in LOSS_KEYS:
                    loss_sums[k] += m.get(k, 0.0) * w
                for k in RATE_KEYS:
                    sums[k] = sums.get(k, 0.0) + m[k] * n_tok
                sums["loss/ratio_max"] = max(sums.get("loss/ratio_max", 0.0), m["loss/ratio_max"])
                rate_w += n_tok
                if ent is not None:
                    ent_sum += float((ent * mask).sum())
                    ent_w += n_tok
            for prm in params:  # rows all skipped: a zero gradient, so AdamW still steps as it would
                if prm.grad is None:
                    prm.grad = torch.zeros_like(prm)
            gn = torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm if cfg.max_grad_norm > 0 else float("inf"))
            bad = learner.global_sum(float(bad or not torch.isfinite(gn))) > 0  # one decision for all ranks
            if bad:
                learner.zero_grad()
                res.nonfinite_skips += 1
            else:
                learner.optimizer.step()
                grad_norms.append(float(gn))
                for k, v in loss_sums.items():
                    sums[k] = sums.get(k, 0.0) + learner.global_sum(v)
                n_updates += 1
            step_schedule(learner.scheduler)
    step_schedule(learner.scheduler, updates_per_step - cfg.ppo_epochs * len(minis))  # fewer families than mini-batches
    m = res.metrics
    for k in LOSS_KEYS:
        m[k] = sums.get(k, 0.0) / max(n_updates, 1)  # mean over this step's optimizer steps
    for k in RATE_KEYS:
        m[k] = sums[k] / rate_w if rate_w else (1.0 if k == "loss/ratio_mean" else 0.0)  # 0 rows run: nothing computed
    m["loss/ratio_max"] = sums.get("loss/ratio_max", 1.0)
    m["actor/grad_norm"] = sum(grad_norms) / len(grad_norms) if grad_norms else float("nan")
    m["actor/entropy"] = ent_sum / ent_w if ent_w else float("nan")  # over the trained rows
    m.update(anchoring_metrics(res.logp, [s.gen_prompt_ids != r[0] for s, r in zip(samples, rows)], learner.global_sum))
    m["train/tokens"] = learner.global_sum(sum(len(p) + len(r) for p, r, _ in rows))
    m["train/rows_skipped_zero_adv"] = learner.global_sum(sum(len(mi) - len(t) for mi, t in zip(minis, trained)))
    m["train/computed_tokens_fwd_bwd"] = learner.global_sum(counter["fwd_bwd"])
    m["train/computed_tokens_fwd"] = learner.global_sum(counter["fwd"])
    return res
