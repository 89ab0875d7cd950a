"""The trainer loop shared by GRPO, matched GRPO, TA-GRPO and its ablations.

One step: pick this step's families -> sample G responses per prompt variant (q0..qN for
TA-GRPO) -> score them -> advantages grouped by family (or per prompt) -> clipped policy loss
with log-probs on the anchor prompt q0 -> AdamW update. Differences from plain GRPO live in the
prompts sampled (`_family_prompts`), the group ids (`batch.advantage_group_ids`) and the prompt
used for log-probs (`batch.training_prompt`); the rest is the same code path.

Runs data-parallel under `accelerate launch`: each process owns whole families, rollout seeds are
derived from (seed, step, family), so a 2-process run normalizes the same families the same way
as a 1-process run; metrics are gathered across ranks.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import signal
import time
from pathlib import Path

from tagrpo.errors import TagrpoError
from tagrpo.train.batch import Sample, advantage_group_ids, collate, pack_micro_batches, training_prompt
from tagrpo.train.config import TrainConfig, dump_config


def _seed_for(*parts: int) -> int:
    h = 1469598103934665603
    for p in parts:
        h = ((h ^ (int(p) & 0xFFFFFFFFFFFF)) * 1099511628211) % (1 << 61)
    return h % (2**31 - 1)


def lr_lambda(schedule: str, warmup: int, total: int):
    def f(step: int) -> float:
        if warmup and step < warmup:
            return (step + 1) / warmup
        if schedule == "constant":
            return 1.0
        progress = (step - warmup) / max(1, total - warmup)
        progress = min(max(progress, 0.0), 1.0)
        if schedule == "linear":
            return 1.0 - progress
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return f


class Trainer:
    """Build with a validated TrainConfig; `train()` runs (or resumes) the job."""

    def __init__(self, cfg: TrainConfig, *, resume: bool = False, accelerator=None, rows: list[dict] | None = None, console=None):
        import torch
        from accelerate import Accelerator

        self.cfg = cfg
        self.acc = accelerator or Accelerator(cpu=not torch.cuda.is_available())
        self.world = self.acc.num_processes
        self.rank = self.acc.process_index
        cfg.validate(self.world)
        self.run_dir = Path(cfg.output_dir)
        self.console = console
        self.resume = resume
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        if cfg.keep_freed_memory:
            from tagrpo._malloc import keep_freed_memory

            keep_freed_memory()
        random.seed(cfg.seed)
        torch.manual_seed(cfg.seed)
        self.skipped_rows: list[str] = []
        self.nonfinite_skips = 0
        self._rows_override = rows
        self.last_update: dict = {}
        # one prompt forward per family, reused through the KV cache (DDP runs full sequences:
        # two forwards before one backward would mark parameters ready twice)
        self.shared_prefix = cfg.shared_prefix and self.world == 1
        self._stop = False

    # ------------------------------------------------------------------ set-up
    def setup(self) -> None:
        import torch

        from tagrpo.rollout import HFGenerateEngine

        cfg = self.cfg
        self.start_step = 0
        ckpt = None
        if self.resume:
            from tagrpo.train.checkpoint import latest_checkpoint

            ckpt = latest_checkpoint(self.run_dir)
        self.model, self.tokenizer, self.ref_model = self._load_model(ckpt)
        self.model.train()
        params = [p for p in self.model.parameters() if p.requires_grad]
        # fused: one kernel over all parameters (CPU and CUDA), instead of a chain of foreach ops
        self.optimizer = torch.optim.AdamW(params, lr=cfg.lr, betas=(cfg.adam_beta1, cfg.adam_beta2),
                                           weight_decay=cfg.weight_decay, fused=True)
        updates = cfg.steps * cfg.ppo_epochs * cfg.num_mini_batches
        warm = int(round(cfg.warmup_ratio * updates))
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_lambda(cfg.schedule, warm, updates))
        self.model, self.optimizer = self.acc.prepare(self.model, self.optimizer)
        if ckpt is not None:
            from tagrpo.train.checkpoint import load_training_state

            state = load_training_state(ckpt, self.optimizer, self.scheduler)
            self.start_step = int(state["step"])
            self.sampled_tokens = int(state.get("sampled_tokens", 0))
            self.nonfinite_skips = int(state.get("nonfinite_skips", 0))
        else:
            self.sampled_tokens = 0
        self.engine = HFGenerateEngine(self.acc.unwrap_model(self.model), self.tokenizer, max_batch_size=cfg.generate_batch_size,
                                     dtype="bf16" if cfg.autocast == "bf16" else "fp32")
        self.data = self._load_data()
        from tagrpo.train.rewards import RewardRunner

        self.rewarder = RewardRunner(cfg.reward, cfg.reward_timeout)
        if self.acc.is_main_process:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            dump_config(cfg, self.run_dir / "config.yaml")
            self._trim_metrics(self.start_step)
        self.tb = None
        if cfg.tensorboard and self.acc.is_main_process:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(str(self.run_dir / "tb"))
            except Exception as e:  # noqa: BLE001 - logging must not stop training
                self._say(f"[yellow]TensorBoard disabled: {e}[/yellow]")
        self.wandb = None
        if cfg.wandb and self.acc.is_main_process:
            try:
                import wandb  # type: ignore

                self.wandb = wandb.init(project=cfg.wandb_project, config=cfg.to_dict(), dir=str(self.run_dir))
            except ImportError:
                raise TagrpoError("wandb: true but the `wandb` package is not installed (pip install wandb)") from None

    def _load_model(self, ckpt):
        import torch

        from tagrpo.models import load_policy, make_tiny_model

        cfg = self.cfg
        if cfg.model == "tiny":
            model, tok = make_tiny_model(seed=cfg.seed)
        else:
            model, tok = load_policy(cfg.model)
        ref = None
        if cfg.beta > 0 and not cfg.lora:
            # the reference is the initial policy, also when resuming (never the checkpoint)
            import copy

            ref = copy.deepcopy(model).eval()
            for p in ref.parameters():
                p.requires_grad_(False)
        if ckpt is not None and not cfg.lora:
            from transformers import AutoModelForCausalLM

            model = AutoModelForCausalLM.from_pretrained(ckpt / "model", dtype=torch.float32)
        attn = cfg.attn_implementation
        if attn == "auto":
            attn = "eager" if not torch.cuda.is_available() else None
        self.train_attn = attn  # the kernel of the training forward; rollouts keep the model's own
        if attn:  # fail now, with the field's name, if this model cannot use it
            prev = model.config._attn_implementation
            try:
                model.set_attn_implementation(attn)
                if ref is not None:
                    ref.set_attn_implementation(attn)  # the reference only runs in the update
            except (ValueError, ImportError) as e:
                raise TagrpoError(f"config field 'attn_implementation': {attn!r} cannot be used with this model: {e}") from None
            model.set_attn_implementation(prev)
        tok.padding_side = "left"
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        if cfg.lora:
            from peft import LoraConfig, PeftModel, get_peft_model

            if ckpt is not None:
                model = PeftModel.from_pretrained(model, ckpt / "model", is_trainable=True)
            else:
                targets = "all-linear" if cfg.lora_target_modules == "all-linear" else [t.strip() for t in cfg.lora_target_modules.split(",")]
                model = get_peft_model(model, LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                                                         target_modules=targets, task_type="CAUSAL_LM"))
        model.config.use_cache = False
        return model, tok, ref

    def _say(self, msg: str) -> None:
        if self.acc.is_main_process:
            if self.console is not None:
                self.console.print(msg)
            else:
                print(msg)

    # ------------------------------------------------------------------ data
    def _load_data(self) -> list[dict]:
        """Rows with tokenized anchor and neighbor prompts; unusable rows are reported and skipped."""
        from tagrpo.rewards import normalize_gold
        from tagrpo.rollout import build_prompt_ids

        cfg = self.cfg
        source = "arith"
        if self._rows_override is not None:
            rows, source = self._rows_override, "rows"
        elif cfg.train_data == "arith":
            from tagrpo.data.arith import generate_problems

            rows = generate_problems(cfg.arith_size, cfg.arith_difficulty, seed=cfg.seed)
        else:
            from tagrpo.data.io import read_rows

            source = cfg.train_data
            rows = read_rows(cfg.train_data, question_field=cfg.question_field or None, answer_field=cfg.answer_field or None)
        n_needed = cfg.num_neighbors if cfg.uses_neighbors else 0
        rule_made: dict[int, list[str]] = {}
        if n_needed:
            want = [i for i, r in enumerate(rows) if cfg.neighbors == "rules" or (cfg.neighbors == "auto" and not r.get("neighbors"))]
            rule_made = self._rule_neighbors([rows[i] for i in want], n_needed, want)
        out = []
        system = cfg.system_prompt or None
        for i, row in enumerate(rows):
            where = f"{source} row {i + 1}"
            q, a = row.get("question"), row.get("answer")
            if not isinstance(q, str) or not q.strip():
                self.skipped_rows.append(f"{where}: no question")
                continue
            if a is None or not normalize_gold(str(a)):
                self.skipped_rows.append(f"{where}: no usable answer")
                continue
            neighbors: list[str] = []
            if n_needed:
                have = row.get("neighbors")
                if cfg.neighbors == "column" or (cfg.neighbors == "auto" and have):
                    if not isinstance(have, list) or len(have) < n_needed:
                        raise TagrpoError(
                            f"{where}: num_neighbors={n_needed} but the row has {len(have) if isinstance(have, list) else 0} "
                            "neighbors; build more with `tagrpo neighbors --n ...`, lower num_neighbors, or set neighbors: rules"
                        )
                    neighbors = [str(x) for x in have[:n_needed]]
                else:
                    neighbors = rule_made.get(i, [])
                    if len(neighbors) < n_needed:
                        self.skipped_rows.append(f"{where}: the rule backend found only {len(neighbors)} of {n_needed} neighbors")
                        continue
            anchor = build_prompt_ids(self.tokenizer, q, cfg.prompt_template, system)
            variants = [build_prompt_ids(self.tokenizer, nb, cfg.prompt_template, system) for nb in neighbors]
            longest = max([len(anchor)] + [len(v) for v in variants])
            if longest > cfg.max_prompt_tokens:
                self.skipped_rows.append(f"{where}: prompt of {longest} tokens > max_prompt_tokens={cfg.max_prompt_tokens}")
                continue
            out.append({"id": row.get("id", i), "question": q, "answer": str(a), "neighbors": neighbors,
                        "prompts": [anchor] + variants})
        if self.skipped_rows:
            self._say(f"[yellow]skipped {len(self.skipped_rows)} rows[/yellow] (first: {self.skipped_rows[0]})")
        if not out:
            raise TagrpoError(f"no usable training rows in {source}")
        return out

    def _rule_neighbors(self, rows: list[dict], n: int, index: list[int]) -> dict[int, list[str]]:
        """Validated rule-backend neighbors (offline, deterministic given the seed), by row index."""
        if not rows:
            return {}
        from tagrpo.neighbors import BuildOptions, RuleBackend, build_neighbors

        usable = [(i, r) for i, r in zip(index, rows) if isinstance(r.get("question"), str) and r.get("answer") is not None]
        built, _ = build_neighbors([{**r, "id": i} for i, r in usable], RuleBackend(seed=self.cfg.seed), options=BuildOptions(n=n))
        return {int(b["id"]): list(b.get("neighbors") or []) for b in built}

    def _epoch_order(self, epoch: int) -> list[int]:
        """The data order of one epoch, a seeded permutation (made once per epoch)."""
        if getattr(self, "_order", (None,))[0] != epoch:
            perm = list(range(len(self.data)))
            random.Random(_seed_for(self.cfg.seed, 7919, epoch)).shuffle(perm)
            self._order = (epoch, perm)
        return self._order[1]

    def families_for_step(self, step: int) -> list[tuple[int, dict]]:
        """(global family index, row) for this process: the step's P families, this rank's share."""
        p = self.cfg.questions_per_step
        n = len(self.data)
        fams = []
        for j in range(p):
            epoch, pos = divmod(step * p + j, n)
            fams.append((j, self.data[self._epoch_order(epoch)[pos]]))
        per = p // self.world
        return fams[self.rank * per : (self.rank + 1) * per]

    # ------------------------------------------------------------------ rollout + reward
    def _prompts(self, fam: int, row: dict, variants: str) -> list[tuple[int, int, list[int]]]:
        """(family, variant, prompt ids) per response to sample. variants: 'all', 'q0', 'neighbors'."""
        cfg, g = self.cfg, self.cfg.samples_per_variant
        anchor = row["prompts"][0]
        if cfg.algorithm == "grpo":
            return [(fam, 0, anchor)] * g
        if cfg.algorithm == "grpo-matched":
            return [(fam, j // g, anchor) for j in range((cfg.num_neighbors + 1) * g)]
        chosen = range(len(row["prompts"]))
        if variants == "q0":
            chosen = [0]
        elif variants == "neighbors":
            chosen = range(1, len(row["prompts"]))
        return [(fam, v, row["prompts"][v]) for v in chosen for _ in range(g)]

    def _sample(self, step: int, fams: list[tuple[int, dict]], variants: str, pass_idx: int) -> list[Sample]:
        from tagrpo.rollout import SamplingParams

        cfg = self.cfg
        samples: list[Sample] = []
        chunk: list[tuple[int, int, list[int]]] = []
        rows_by_fam = dict(fams)

        def flush():
            if not chunk:
                return
            params = SamplingParams(temperature=cfg.temperature, top_p=cfg.top_p, max_new_tokens=cfg.max_new_tokens,
                                    seed=_seed_for(cfg.seed, step, chunk[0][0], pass_idx))
            comps = self.engine.generate([p for _, _, p in chunk], params)
            for (f, v, p), c in zip(chunk, comps):
                row = rows_by_fam[f]
                samples.append(Sample(family=f, variant=v, gen_prompt_ids=p, anchor_prompt_ids=row["prompts"][0],
                                      response_ids=c.token_ids, text=c.text, finished=c.finished, answer=row["answer"]))
            chunk.clear()

        for f, row in fams:
            todo = self._prompts(f, row, variants)
            if chunk and len(chunk) + len(todo) > cfg.generate_batch_size:
                flush()
            chunk.extend(todo)
        flush()
        return samples

    def _score(self, samples: list[Sample]) -> None:
        rewards = self.rewarder.score([s.text for s in samples], [s.answer for s in samples])
        for s, r in zip(samples, rewards):
            s.reward = r

    def rollout(self, step: int, fams: list[tuple[int, dict]]) -> tuple[list[Sample], float, float]:
        """Samples (scored) for this rank's families; returns (samples, generate s, reward s)."""
        t0 = time.perf_counter()
        tg = tr = 0.0
        if self.cfg.augment == "on-uniform" and self.cfg.uses_neighbors:
            first = self._sample(step, fams, "q0", 0)
            tg += time.perf_counter() - t0
            t1 = time.perf_counter()
            self._score(first)
            tr += time.perf_counter() - t1
            uniform = {f for f, _ in fams if len({s.reward for s in first if s.family == f}) == 1}
            t2 = time.perf_counter()
            more = self._sample(step, [fr for fr in fams if fr[0] in uniform], "neighbors", 1)
            tg += time.perf_counter() - t2
            t3 = time.perf_counter()
            self._score(more)
            tr += time.perf_counter() - t3
            for s in first + more:
                s.extra["augmented"] = s.family in uniform
            samples = sorted(first + more, key=lambda s: (s.family, s.variant))
            return samples, tg, tr
        samples = self._sample(step, fams, "all", 0)
        tg = time.perf_counter() - t0
        t1 = time.perf_counter()
        self._score(samples)
        tr = time.perf_counter() - t1
        return samples, tg, tr

    # ------------------------------------------------------------------ advantages
    def compute_advantages(self, samples: list[Sample]) -> None:
        import torch

        from tagrpo.core import group_advantages

        cfg = self.cfg
        nv = cfg.num_neighbors + 1
        gids = advantage_group_ids(samples, cfg.algorithm, nv)
        r = torch.tensor([s.reward for s in samples], dtype=torch.float32)  # (B,)
        ids = torch.tensor(gids, dtype=torch.long)  # (B,)
        if cfg.adv_scale == "batch" and self.world > 1:
            raise TagrpoError("adv_scale: batch is not supported with several processes yet; use group or none")
        adv = group_advantages(r, ids, scale=cfg.adv_scale, eps=cfg.adv_eps)  # (B,)
        for s, a, g in zip(samples, adv.tolist(), gids):
            s.adv, s.adv_group = a, g

    # ------------------------------------------------------------------ log-probs + update
    def _forward_logprobs(self, model, prompts, responses, want_entropy: bool = False):
        import torch

        from tagrpo.core import selective_log_softmax, token_entropy

        ids, att, pos, resp, rmask = collate(prompts, responses, self.tokenizer.pad_token_id)
        t = resp.shape[1]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.cfg.autocast == "bf16"):
            out = model(input_ids=ids, attention_mask=att, position_ids=pos, logits_to_keep=t + 1, use_cache=False)
        logits = out.logits[:, :-1].float() / self.cfg.temperature  # (b, T, V) predicts response tokens
        logp = selective_log_softmax(logits, resp)  # (b, T)
        ent = token_entropy(logits.detach()) if want_entropy else None  # (b, T)
        return logp, rmask, ent

    def _forward_logprobs_shared(self, model, prompts, responses, groups=None, want_entropy: bool = False):
        """Log-probs of responses to a few shared prompts: each distinct prompt is run once (left
        padded to the longest), its KV cache row is gathered for every response of that prompt
        (`groups[i]` = index into `prompts` of response i; default all 0), and gradients flow back
        through it. Same values as `_forward_logprobs` on (prompt + response) rows, with each
        prompt's compute paid once: for TA-GRPO one anchor q0 per family, for GRPO one per question."""
        import torch

        from tagrpo.core import selective_log_softmax, token_entropy

        if prompts and isinstance(prompts[0], int):  # a single prompt
            prompts = [prompts]
        b = len(responses)
        groups = [0] * b if groups is None else groups
        k = len(prompts)
        pm = max(len(p) for p in prompts)
        t = max(max(len(r) for r in responses), 1)
        pad = self.tokenizer.pad_token_id
        pids = torch.full((k, pm), pad, dtype=torch.long)  # (k, Pm) left padded
        patt = torch.zeros((k, pm), dtype=torch.long)  # (k, Pm)
        for j, p in enumerate(prompts):
            pids[j, pm - len(p):] = torch.tensor(p, dtype=torch.long)
            patt[j, pm - len(p):] = 1
        ppos = (patt.cumsum(-1) - 1).clamp(min=0)  # (k, Pm) positions ignore left padding
        resp = torch.full((b, t), pad, dtype=torch.long)  # (b, T)
        rmask = torch.zeros((b, t), dtype=torch.float32)  # (b, T)
        for i, r in enumerate(responses):
            resp[i, : len(r)] = torch.tensor(r, dtype=torch.long)
            rmask[i, : len(r)] = 1.0
        g = torch.tensor(groups, dtype=torch.long)  # (b,)
        att = torch.cat([patt[g], rmask.long()], dim=1)  # (b, Pm+T)
        pos = patt.sum(-1)[g].unsqueeze(1) + torch.arange(t).unsqueeze(0)  # (b, T)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.cfg.autocast == "bf16"):
            pre = model(input_ids=pids, attention_mask=patt, position_ids=ppos, use_cache=True, logits_to_keep=1)
            cache = getattr(pre, "cache", None) or pre.past_key_values
            cache.batch_select_indices(g)  # (k, ...) -> (b, ...): each response gets its prompt's KV rows
            out = model(input_ids=resp, attention_mask=att, position_ids=pos, use_cache=True, logits_to_keep=t,
                        **{self._cache_kwarg(model): cache})
        first = pre.logits[:, -1:].float()[g]  # (b, 1, V) predicts response token 0
        logits = torch.cat([first, out.logits[:, :-1].float()], dim=1) / self.cfg.temperature  # (b, T, V)
        logp = selective_log_softmax(logits, resp)  # (b, T)
        ent = token_entropy(logits.detach()) if want_entropy else None  # (b, T)
        return logp, rmask, ent

    def _cache_kwarg(self, model) -> str:
        """'cache' in recent transformers, 'past_key_values' before the rename."""
        if not hasattr(self, "_cache_kw"):
            import inspect

            base = self.acc.unwrap_model(model)
            base = base.get_base_model() if hasattr(base, "get_base_model") else base
            self._cache_kw = "cache" if "cache" in inspect.signature(type(base).forward).parameters else "past_key_values"
        return self._cache_kw

    def _mb_logprobs(self, model, rows, mb, want_entropy: bool = False):
        import torch

        prompts = [rows[i][0] for i in mb]
        responses = [rows[i][1] for i in mb]
        t = max(len(r) for r in responses)
        # tokens actually run through the model (padding included), for FLOP/s accounting
        key = "fwd_bwd" if torch.is_grad_enabled() else "fwd"
        if not self.shared_prefix:
            self.computed_tokens[key] += len(mb) * (max(len(p) for p in prompts) + t)
            return self._forward_logprobs(model, prompts, responses, want_entropy)
        distinct: dict[tuple, int] = {}
        groups = [distinct.setdefault(tuple(p), len(distinct)) for p in prompts]
        uniq = [list(p) for p in distinct]
        self.computed_tokens[key] += len(uniq) * max(len(p) for p in uniq) + len(mb) * t
        return self._forward_logprobs_shared(model, uniq, responses, groups, want_entropy)

    def _pack(self, rows, idx: list[int]) -> list[list[int]]:
        """Micro-batches of row indices. With shared_prefix, rows are ordered by prompt (the
        anchor prompt for TA-GRPO: a whole family) and a micro-batch holds as many prompts' rows
        as fit in the budget, counted as prompts x longest prompt + rows x longest response."""
        budget = self.cfg.micro_batch_tokens
        if not self.shared_prefix:
            lengths = [(len(rows[i][0]), len(rows[i][1])) for i in idx]
            return [[idx[j] for j in b] for b in pack_micro_batches(lengths, budget)]
        by_prompt: dict[tuple, list[int]] = {}
        for i in idx:
            by_prompt.setdefault(tuple(rows[i][0]), []).append(i)
        out: list[list[int]] = []
        cur: list[int] = []
        n_prompts = max_p = max_t = 0
        for prompt, members in by_prompt.items():
            members.sort(key=lambda i: len(rows[i][1]))
            new_prompt = True
            for i in members:
                k = n_prompts + new_prompt
                p, t = max(max_p, len(prompt)), max(max_t, len(rows[i][1]))
                if cur and k * p + (len(cur) + 1) * t > budget:
                    out.append(cur)
                    cur, n_prompts, max_p, max_t, new_prompt = [], 0, 0, 0, True
                    k, p, t = 1, len(prompt), len(rows[i][1])
                cur.append(i)
                n_prompts, max_p, max_t, new_prompt = k, p, t, False
        if cur:
            out.append(cur)
        return out

    def _no_grad_logprobs(self, model, rows, batches, disable_adapter: bool = False):
        import torch

        res: dict[int, object] = {}
        ctx = self.acc.unwrap_model(self.model).disable_adapter() if disable_adapter else contextlib.nullcontext()
        with torch.no_grad(), ctx:
            for mb in batches:
                logp, _, _ = self._mb_logprobs(model, rows, mb)
                for k, i in enumerate(mb):
                    res[i] = logp[k, : len(rows[i][1])].clone()
        return res

    def _global_sum(self, x: float) -> float:
        if self.world == 1:
            return x
        import torch

        t = torch.tensor([x], dtype=torch.float64)
        return float(self.acc.reduce(t, reduction="sum").item())

    @contextlib.contextmanager
    def _training_attention(self):
        """The training forward's attention kernel (`attn_implementation`) for the duration of an
        update. Eager attention trains faster than SDPA's flash backward on CPU at these lengths,
        while SDPA decodes faster, so rollouts (and a bf16 rollout copy) keep the model's own."""
        if not self.train_attn:
            yield
            return
        base = self.acc.unwrap_model(self.model)
        prev = base.config._attn_implementation
        base.set_attn_implementation(self.train_attn)
        try:
            yield
        finally:
            base.set_attn_implementation(prev)

    def update(self, samples: list[Sample]) -> dict:
        import torch

        from tagrpo.core import policy_loss

        cfg = self.cfg
        keep = samples
        if cfg.filter_uniform:
            by_group: dict[int, set] = {}
            for s in samples:
                by_group.setdefault(s.adv_group, set()).add(s.reward)
            keep = [s for s in samples if len(by_group[s.adv_group]) > 1]
        keep = [s for s in keep if s.response_ids]
        self.computed_tokens = {"fwd_bwd": 0, "fwd": 0}
        rows = [(training_prompt(s, cfg.algorithm), s.response_ids, s.adv) for s in keep]
        self.last_update = {"prompts": [r[0] for r in rows], "responses": [r[1] for r in rows], "samples": keep, "logp": {}}
        total_rows = self._global_sum(len(rows))
        metrics: dict[str, float] = {"train/rows": total_rows}
        if total_rows == 0:
            metrics["train/skipped_empty"] = 1.0
            return metrics
        # mini-batches hold whole families
        fam_order = sorted({s.family for s in keep})
        n_mb = min(cfg.num_mini_batches, max(1, len(fam_order)))
        fam_to_mb = {f: k * n_mb // max(1, len(fam_order)) for k, f in enumerate(fam_order)}
        minis = [[i for i, s in enumerate(keep) if fam_to_mb[s.family] == m] for m in range(n_mb)]
        lengths = [(len(p), len(r)) for p, r, _ in rows]
        # With beta == 0 a response whose advantage is 0 adds exactly nothing to the gradient
        # (its loss terms are 0 * ratio); skip its forward/backward but keep its tokens in the
        # normalizers, so the update is the same. Off under DDP (every rank must run backward).
        skip_zero = cfg.skip_zero_adv and cfg.beta == 0 and self.world == 1
        trained = [[i for i in mini if not (skip_zero and rows[i][2] == 0.0)] for mini in minis]
        packs = [self._pack(rows, t) if t else [] for t in trained]
        all_batches = [b for pk in packs for b in pk]
        need_old = cfg.ppo_epochs > 1 or n_mb > 1
        old = self._no_grad_logprobs(self.model, rows, all_batches) if need_old else None
        ref = None
        if cfg.beta > 0:
            ref = (self._no_grad_logprobs(self.model, rows, all_batches, disable_adapter=True) if cfg.lora
                   else self._no_grad_logprobs(self.ref_model, rows, all_batches))
        lr_used = self.scheduler.get_last_lr()[0]  # the rate of this step's first update
        agg_metrics: dict[str, float] = {}
        weight_sum = 0.0
        grad_norms, entropies, ent_w = [], 0.0, 0.0
        params = [p for p in self.model.parameters() if p.requires_grad]
        for epoch in range(cfg.ppo_epochs):
            for m, batches in enumerate(packs):
                mini = minis[m]
                tok_total = self._global_sum(sum(lengths[i][1] for i in mini))
                seq_total = self._global_sum(len(mini))
                self.optimizer.zero_grad(set_to_none=True)
                bad = False
                for b_i, mb in enumerate(batches):
                    want_ent = epoch == 0
                    sync = b_i == len(batches) - 1
                    ctx = self.acc.no_sync(self.model) if (self.world > 1 and not sync) else contextlib.nullcontext()
                    with ctx:
                        logp, rmask, ent = self._mb_logprobs(self.model, rows, mb, want_ent)
                        t = logp.shape[1]
                        if epoch == 0:
                            for k, i in enumerate(mb):
                                self.last_update["logp"][i] = logp[k, : len(rows[i][1])].detach().clone()
                        old_lp = _stack([old[i] for i in mb], t) if old is not None else logp.detach()  # (b, T)
                        ref_lp = _stack([ref[i] for i in mb], t) if ref is not None else None  # (b, T)
                        adv = torch.tensor([rows[i][2] for i in mb], dtype=torch.float32)  # (b,)
                        loss, lm = policy_loss(logp, old_lp, adv, rmask, clip_low=cfg.clip_low, clip_high=cfg.clip_high,
                                               agg=cfg.agg, ref_logp=ref_lp, beta=cfg.beta)
                        n_tok = float(rmask.sum())
                        if cfg.agg == "token-mean":
                            w = n_tok / tok_total
                        elif cfg.agg == "seq-mean-token-mean":
                            w = len(mb) / seq_total
                        else:  # token sum / T with T = max_new_tokens, whatever this micro-batch's width
                            w = (len(mb) / seq_total) * (t / cfg.max_new_tokens)
                        if not torch.isfinite(loss):
                            bad = True
                            continue
                        self.acc.backward(loss * w * self.world)
                    for k, v in lm.items():
                        agg_metrics[k] = agg_metrics.get(k, 0.0) + v * n_tok
                    weight_sum += n_tok
                    if ent is not None:
                        entropies += float((ent * rmask).sum())
                        ent_w += n_tok
                for prm in params:  # rows all skipped: a zero gradient, so AdamW still steps as it would
                    if prm.grad is None:
                        prm.grad = torch.zeros_like(prm)
                gn = torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm if cfg.max_grad_norm > 0 else float("inf"))
                if bad or not torch.isfinite(gn):
                    self.optimizer.zero_grad(set_to_none=True)
                    self.nonfinite_skips += 1
                    self._say(f"[red]non-finite loss or gradient: update skipped ({self.nonfinite_skips} so far)[/red]")
                else:
                    self.optimizer.step()
                    grad_norms.append(float(gn))
                self.scheduler.step()
        for k, v in agg_metrics.items():
            if k in ("loss/tokens",):
                continue
            metrics[k] = v / max(weight_sum, 1.0)
        metrics["actor/grad_norm"] = sum(grad_norms) / len(grad_norms) if grad_norms else float("nan")
        metrics["actor/entropy"] = entropies / ent_w if ent_w else float("nan")  # over the trained rows
        for k, v in (("loss/policy", 0.0), ("loss/total", 0.0), ("loss/clipfrac", 0.0), ("loss/approx_kl", 0.0),
                     ("loss/ratio_mean", 1.0)):
            metrics.setdefault(k, v)  # every row skipped (all advantages 0): nothing was computed
        metrics["actor/lr"] = lr_used
        metrics["train/nonfinite_skips"] = float(self.nonfinite_skips)
        metrics["train/tokens"] = self._global_sum(sum(p + r for p, r in lengths))
        metrics["train/rows_skipped_zero_adv"] = self._global_sum(sum(len(mi) - len(t) for mi, t in zip(minis, trained)))
        metrics["train/computed_tokens_fwd_bwd"] = self._global_sum(self.computed_tokens["fwd_bwd"])
        metrics["train/computed_tokens_fwd"] = self._global_sum(self.computed_tokens["fwd"])
        if "loss/kl" not in metrics:
            metrics["loss/kl"] = 0.0
        return metrics

    # ------------------------------------------------------------------ metrics
    def rollout_metrics(self, samples: list[Sample]) -> dict:
        import torch

        from tagrpo.core import nonzero_advantage_fraction, uniform_fraction

        cfg = self.cfg
        recs = [(s.family, s.variant, s.reward, s.adv, len(s.response_ids), s.finished, bool(s.extra.get("augmented", True))) for s in samples]
        if self.world > 1:
            from accelerate.utils import gather_object

            recs = gather_object(recs)
        fam = torch.tensor([r[0] for r in recs], dtype=torch.long)
        var = torch.tensor([r[1] for r in recs], dtype=torch.long)
        rew = torch.tensor([r[2] for r in recs], dtype=torch.float32)
        adv = torch.tensor([r[3] for r in recs], dtype=torch.float32)
        lens = [r[4] for r in recs]
        m: dict[str, float] = {
            "reward/mean": rew.mean().item(),
            "reward/std": rew.std(unbiased=False).item(),
        }
        for v in sorted(set(var.tolist())):
            sel = rew[var == v]
            m[f"reward/variant_{v}/mean"] = sel.mean().item()
            m[f"reward/variant_{v}/std"] = sel.std(unbiased=False).item()
        q0 = var == 0
        uq = uniform_fraction(rew[q0], fam[q0])
        uf = uniform_fraction(rew, fam)
        for k in ("uniform", "all_correct", "all_wrong"):
            suffix = "" if k == "uniform" else f"_{k}"
            m[f"uniform/q0{suffix}"] = uq[k]
            m[f"uniform/family{suffix}"] = uf[k]
        m["adv/nonzero_frac"] = nonzero_advantage_fraction(adv)
        m["adv/abs_mean"] = adv.abs().mean().item()
        m["response/length_mean"] = sum(lens) / len(lens)
        m["response/length_max"] = float(max(lens))
        m["response/truncation_rate"] = sum(1 for r in recs if not r[5]) / len(recs)
        m["rollout/responses"] = float(len(recs))
        if cfg.augment == "on-uniform" and cfg.uses_neighbors:
            fams = {r[0]: r[6] for r in recs}
            m["rollout/augmented_frac"] = sum(fams.values()) / max(1, len(fams))
        return m

    # ------------------------------------------------------------------ loop
    def _trim_metrics(self, keep_upto: int) -> None:
        path = self.run_dir / "metrics.jsonl"
        if not path.exists():
            return
        lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
        kept = []
        for ln in lines:
            try:
                if json.loads(ln).get("step", 0) <= keep_upto:
                    kept.append(ln)
            except json.JSONDecodeError:
                continue  # a line cut by a kill
        tmp = path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(x + "\n" for x in kept))
        os.replace(tmp, path)

    def _log(self, metrics: dict) -> None:
        if not self.acc.is_main_process:
            return
        with open(self.run_dir / "metrics.jsonl", "a") as f:
            f.write(json.dumps(metrics) + "\n")
            f.flush()
            os.fsync(f.fileno())
        step = int(metrics["step"])
        if self.tb is not None:
            for k, v in metrics.items():
                if isinstance(v, (int, float)) and k != "step" and math.isfinite(v):
                    self.tb.add_scalar(k, v, step)
            self.tb.flush()
        if self.wandb is not None:
            self.wandb.log({k: v for k, v in metrics.items() if isinstance(v, (int, float))}, step=step)

    def save(self, step: int) -> None:
        from tagrpo.train.checkpoint import save_checkpoint

        self.acc.wait_for_everyone()
        if self.acc.is_main_process:
            save_checkpoint(self.run_dir, step, self.acc.unwrap_model(self.model), self.tokenizer, self.optimizer, self.scheduler,
                            {"sampled_tokens": self.sampled_tokens, "nonfinite_skips": self.nonfinite_skips},
                            keep=self.cfg.keep_checkpoints)
        self.acc.wait_for_everyone()

    def save_final(self) -> Path:
        out = self.run_dir / "final"
        self.acc.wait_for_everyone()
        if self.acc.is_main_process:
            from tagrpo._fs import atomic_directory

            model = self.acc.unwrap_model(self.model)
            if self.cfg.lora:
                import copy

                model = copy.deepcopy(model).merge_and_unload()
            with atomic_directory(out) as tmp:
                model.save_pretrained(tmp, safe_serialization=True)
                self.tokenizer.save_pretrained(tmp)
        self.acc.wait_for_everyone()
        return out

    def train_step(self, step: int) -> dict:
        """Run step `step` (0-based); returns the logged metrics (with 'step' = step + 1)."""
        t0 = time.perf_counter()
        fams = self.families_for_step(step)
        samples, t_gen, t_rew = self.rollout(step, fams)
        self.compute_advantages(samples)
        metrics = {"step": step + 1, "algorithm": self.cfg.algorithm}
        metrics.update(self.rollout_metrics(samples))
        gen_tokens = self._global_sum(sum(len(s.response_ids) for s in samples))
        self.sampled_tokens += int(gen_tokens)
        if self.cfg.diversity_every and (step + 1) % self.cfg.diversity_every == 0:
            metrics.update(self._diversity(samples))
        t1 = time.perf_counter()
        with self._training_attention():
            metrics.update(self.update(samples))
        t_train = time.perf_counter() - t1
        dt = time.perf_counter() - t0
        metrics.update({
            "time/generate": t_gen, "time/reward": t_rew, "time/train": t_train, "time/step": dt,
            "perf/tokens_per_s": gen_tokens / dt if dt > 0 else 0.0,
            "perf/gen_tokens_per_s": gen_tokens / t_gen if t_gen > 0 else 0.0,
            "perf/train_tokens_per_s": metrics.get("train/tokens", 0.0) / t_train if t_train > 0 else 0.0,
            "perf/sampled_tokens": float(self.sampled_tokens),
        })
        return metrics

    def _diversity(self, samples: list[Sample]) -> dict:
        try:
            from tagrpo.eval.diversity import mean_pairwise_distance
        except ImportError:
            return {}
        by_fam: dict[int, list[str]] = {}
        for s in samples:
            if s.variant == 0 or self.cfg.algorithm != "grpo-matched":
                by_fam.setdefault(s.family, []).append(s.text)
        return {"diversity/mean_pairwise_distance": float(mean_pairwise_distance(list(by_fam.values())))}

    def _install_signal_handlers(self):
        def handler(signum, frame):
            self._stop = True
            self._say(f"[yellow]signal {signum}: finishing this step, saving a checkpoint, then exiting[/yellow]")

        old = {}
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                old[sig] = signal.signal(sig, handler)
            except ValueError:  # not the main thread
                pass
        return old

    def train(self, progress=None) -> dict:
        """Run steps start..steps; returns the last metrics. Ctrl-C/SIGTERM saves and stops."""
        if not hasattr(self, "model"):
            self.setup()
        cfg = self.cfg
        old = self._install_signal_handlers()
        last: dict = {}
        try:
            for step in range(self.start_step, cfg.steps):
                last = self.train_step(step)
                self._log(last)
                if progress is not None:
                    progress(last)
                done = step + 1
                if self._stop:
                    self.save(done)
                    self._say(f"stopped after step {done}; resume with: tagrpo train --resume {self.run_dir}")
                    return last
                if cfg.save_every and done % cfg.save_every == 0 and done < cfg.steps:
                    self.save(done)
            if cfg.steps > self.start_step:
                self.save(cfg.steps)
            if cfg.save_final:
                self.save_final()
        finally:
            for sig, h in old.items():
                signal.signal(sig, h)
            if self.tb is not None:
                self.tb.close()
        return last


def _stack(rows, t: int):
    import torch

    out = torch.zeros((len(rows), t), dtype=torch.float32)  # (b, T)
    for i, r in enumerate(rows):
        out[i, : r.shape[0]] = r
    return out
