"""The trainer shared by GRPO, matched GRPO, TA-GRPO and its ablations: set-up, the step, the
loop with checkpoints and signals.

`Trainer.train_step` is the algorithm in one place:

    families -> rollouts -> rewards -> group ids -> advantages -> anchored rows
             -> old / ref log-probs -> update -> metrics

The algorithms differ only in `batch` (which prompts are sampled, the group ids, the prompt the
log-probs are computed on); everything else is one code path. Runs on the accelerator's device
(CPU or CUDA) and data-parallel under `accelerate launch`: each process owns whole families,
rollout seeds depend on (seed, step, family, sample) only, so a 2-process run samples and
normalizes the same families the same way as a 1-process run; metrics are gathered across ranks.
"""

from __future__ import annotations

import contextlib
import copy
import random
import signal
import time
from pathlib import Path

import torch

from tagrpo.errors import TagrpoError
from tagrpo.train import batch as B
from tagrpo.train.config import TrainConfig, dump_config
from tagrpo.train.data import load_families, step_families
from tagrpo.train.metrics import AnchorGapWatch, MetricsLog, diversity_metrics, rollout_metrics
from tagrpo.train.packed_prefix import BLOCKS_KERNEL
from tagrpo.train.rollout import rollout
from tagrpo.train.update import Learner, ppo_update


def make_accelerator(cfg: TrainConfig):
    """An Accelerator on cfg.device ('auto': CUDA when present)."""
    from accelerate import Accelerator

    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise TagrpoError("config field 'device': 'cuda' but torch sees no CUDA device; use auto or cpu")
    return Accelerator(cpu=cfg.device == "cpu" or not torch.cuda.is_available())


class Trainer:
    """Build with a validated TrainConfig; `train()` runs (or resumes) the job."""

    def __init__(self, cfg: TrainConfig, *, resume: bool = False, accelerator=None, rows: list[dict] | None = None, console=None):
        self.cfg = cfg
        self.acc = accelerator or make_accelerator(cfg)
        self.world, self.rank = self.acc.num_processes, self.acc.process_index
        cfg.validate(self.world)
        self.device = self.acc.device
        self.run_dir = Path(cfg.output_dir)
        self.console, self.resume, self._rows_override = console, resume, rows
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        if cfg.keep_freed_memory and self.device.type == "cpu":
            from tagrpo._malloc import keep_freed_memory

            keep_freed_memory()
        random.seed(cfg.seed)
        torch.manual_seed(cfg.seed)
        self.nonfinite_skips = 0
        self.sampled_tokens = 0
        self.start_step = 0
        self.last_update: dict = {}
        self.anchor_watch = AnchorGapWatch()  # TA-GRPO: anchored rows far off-policy under q0
        self._stop = False

    # ------------------------------------------------------------------ set-up
    def setup(self) -> None:
        from tagrpo.rollout import HFGenerateEngine
        from tagrpo.train.checkpoint import latest_checkpoint, load_training_state
        from tagrpo.train.logprobs import head_is_plain
        from tagrpo.train.model import load_models, make_optimizer, use_bf16
        from tagrpo.train.rewards import RewardRunner

        cfg = self.cfg
        for w in cfg.warnings():
            self._say(f"[yellow]{w}[/yellow]")
        ckpt = latest_checkpoint(self.run_dir) if self.resume else None
        model, self.tokenizer, self.ref_model, self.train_attn = load_models(cfg, self.device, ckpt)
        model.train()
        optimizer, self.scheduler = make_optimizer(model, cfg)
        self.model, self.optimizer = self.acc.prepare(model, optimizer)
        if ckpt is not None:
            state = load_training_state(ckpt, self.optimizer, self.scheduler)
            self.start_step = int(state["step"])
            self.sampled_tokens = int(state.get("sampled_tokens", 0))
            self.nonfinite_skips = int(state.get("nonfinite_skips", 0))
        policy = self.acc.unwrap_model(self.model)
        chunked = head_is_plain(policy)
        if not chunked:
            self._say("[yellow]this model post-processes its logits (soft-capping or scaling): log-probs use full "
                      "(rows, T, vocab) logits, which needs more memory[/yellow]")
        bf16 = use_bf16(cfg, self.device)
        autocast = bf16 and next(policy.parameters()).dtype == torch.float32  # no casts when the weights are bf16 already
        if cfg.gradient_checkpointing:
            if hasattr(policy, "activation_checkpointing_enable"):  # transformers >= 5.x; the old name warns
                policy.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
            else:
                policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        # one prompt forward per family, reused through the KV cache; under gradient checkpointing
        # (a cache cannot be checkpointed) and DDP (two forwards before one backward would mark
        # parameters ready twice) one forward with a block mask instead, and always with
        # tagrpo_eager (CPU's default), which computes that forward block by block: the cache's
        # arithmetic in one forward, faster and leaner than the cache (benchmarks/memory "Session 21")
        self.learner = Learner(model=self.model, optimizer=self.optimizer, scheduler=self.scheduler, device=self.device,
                               pad_id=self.tokenizer.pad_token_id, ref_model=self.ref_model, accelerator=self.acc,
                               autocast=autocast, chunked=chunked,
                               shared_prefix=cfg.shared_prefix,
                               packed_prefix=cfg.gradient_checkpointing or self.world > 1 or self.train_attn == BLOCKS_KERNEL,
                               flat_grads=self._lean_cpu_memory and self.world == 1,
                               trim_heap=self._lean_cpu_memory)
        emb = policy.get_input_embeddings()
        if self.learner.flat_grads and isinstance(emb, torch.nn.Embedding) and emb.weight.requires_grad:
            # the embedding's gradient as (rows, H) sparse rows added into the flat buffer instead of
            # a dense (V, H) float32 temporary a micro-batch (SmolLM2: 113 MB); the buffer exists
            # before every backward, so .grad itself never becomes sparse
            emb.sparse = True
        self.engine = HFGenerateEngine(policy, self.tokenizer, max_batch_size=cfg.generate_batch_size,
                                       dtype="bf16" if bf16 else "fp32", lean=self._lean_cpu_memory)
        self.data, self.skipped_rows = load_families(cfg, self.tokenizer, self._rows_override)
        if self.skipped_rows:
            self._say(f"[yellow]skipped {len(self.skipped_rows)} rows[/yellow] (first: {self.skipped_rows[0]})")
        self.rewarder = RewardRunner(cfg.reward, cfg.reward_timeout)
        self.log = None
        if self.acc.is_main_process:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            dump_config(cfg, self.run_dir / "config.yaml")
            self.log = MetricsLog(self.run_dir, cfg.tensorboard, cfg.wandb_project if cfg.wandb else None, cfg.to_dict(), self._say)
            self.log.trim(self.start_step)

    @property
    def shared_prefix(self) -> bool:
        return self.learner.shared_prefix

    def _say(self, msg: str) -> None:
        if self.acc.is_main_process:
            (self.console.print if self.console is not None else print)(msg)

    # ------------------------------------------------------------------ the step
    def families_for_step(self, step: int) -> list[tuple[int, dict]]:
        """(family index within the step, row) for this process."""
        return step_families(self.data, step, self.cfg.questions_per_step, self.cfg.seed, self.rank, self.world)

    def rollout(self, step: int, fams: list[tuple[int, dict]]):
        """Scored samples for this rank's families: (samples, generate s, reward s)."""
        ro = rollout(self.engine, self.rewarder, step, fams, self.cfg)
        return ro.samples, ro.t_generate, ro.t_reward

    def compute_advantages(self, samples: list[B.Sample]) -> None:
        B.assign_advantages(samples, self.cfg.algorithm, self.cfg.num_neighbors + 1, self.cfg.adv_scale, self.cfg.adv_eps)

    def train_step(self, step: int) -> dict:
        """Run step `step` (0-based); returns the logged metrics (with 'step' = step + 1)."""
        cfg, t0 = self.cfg, time.perf_counter()
        self.learner.release_grads()  # the rollout's KV cache can reuse the last update's gradients
        fams = self.families_for_step(step)  # this rank's questions + neighbors
        ro = rollout(self.engine, self.rewarder, step, fams, cfg)  # (N+1)*G responses per family, scored
        samples = ro.samples
        self.compute_advantages(samples)  # group ids (family / prompt / variant) -> advantages
        rows = B.training_rows(samples, cfg.algorithm, cfg.filter_uniform)  # anchored on q0 in update
        gather = None
        if self.world > 1:
            from accelerate.utils import gather_object as gather
        metrics = {"step": step + 1, "algorithm": cfg.algorithm,
                   **rollout_metrics(samples, on_uniform=cfg.augment == "on-uniform" and cfg.uses_neighbors, gather=gather)}
        metrics["reward/nonfinite"] = self.learner.global_sum(ro.nonfinite_rewards)
        gen_tokens = self.learner.global_sum(sum(len(s.response_ids) for s in samples))
        self.sampled_tokens += int(gen_tokens)
        if cfg.diversity_every and (step + 1) % cfg.diversity_every == 0:
            metrics.update(diversity_metrics(samples, cfg.algorithm))
        self.release_free_memory()
        t1 = time.perf_counter()
        with self._training_attention():
            metrics.update(self.update(rows))  # old / ref / current log-probs -> clipped loss -> AdamW
        self.release_free_memory()
        t_train, dt = time.perf_counter() - t1, time.perf_counter() - t0
        t_gen = ro.t_generate
        metrics.update({"time/generate": t_gen, "time/reward": ro.t_reward, "time/train": t_train, "time/step": dt,
                        "perf/tokens_per_s": gen_tokens / dt if dt > 0 else 0.0,
                        "perf/gen_tokens_per_s": gen_tokens / t_gen if t_gen > 0 else 0.0,
                        "perf/train_tokens_per_s": metrics.get("train/tokens", 0.0) / t_train if t_train > 0 else 0.0,
                        "perf/sampled_tokens": float(self.sampled_tokens)})
        return metrics

    @property
    def _lean_cpu_memory(self) -> bool:
        """gradient_checkpointing on a CPU whose allocator keeps freed memory (keep_freed_memory):
        the user chose memory over speed, and the update touches little memory, so the trainer
        also puts an update's gradients in one memory-mapped buffer unmapped before the next
        rollout (no heap fragmentation from reallocating them), adds the lm-head and embedding
        gradients straight into it, frees the rollout copy's packed projections after prefill and
        trims the heap between rollout and update and after each micro-batch's backward. Measured
        (benchmarks/memory/RESULTS.md, sessions 5, 7 and 9): the demo's 3-step run 3.07 -> 2.80 GB
        at the same speed (fp32), the demo 3.78 -> 3.62 GB (bf16), the per-backward trim 3.50 ->
        3.23 GB at +1% wall; with one large micro-batch and no checkpointing (speed benchmark) the
        trim and the kept buffer cost instead: +6% memory and +35% update time (faulting pages back in)."""
        return self.cfg.gradient_checkpointing and self.cfg.keep_freed_memory and self.device.type == "cpu"

    def release_free_memory(self) -> None:
        """Between phases (rollout, update, an evaluation) with lean CPU memory (above): free heap
        pages go back to the system, so the resident size follows what is in use (tagrpo._malloc)."""
        if self._lean_cpu_memory:
            from tagrpo._malloc import release_free_memory

            self.engine.release_copy()  # the bf16 rollout copy is cast again at the next rollout
            release_free_memory()

    def update(self, rows: list[B.Sample]) -> dict:
        """The PPO update on the kept samples; keeps what it computed in `last_update` (tests, debugging)."""
        up = ppo_update(self.learner, rows, self.cfg)
        if up.nonfinite_skips:
            self.nonfinite_skips += up.nonfinite_skips
            self._say(f"[red]non-finite loss or gradient: update skipped ({self.nonfinite_skips} so far)[/red]")
        self.last_update = {"samples": rows, "prompts": [B.training_prompt(s, self.cfg.algorithm) for s in rows],
                            "responses": [s.response_ids for s in rows], "logp": up.logp, "old": up.old, "ref": up.ref}
        return {**up.metrics, "train/nonfinite_skips": float(self.nonfinite_skips)}

    @contextlib.contextmanager
    def _training_attention(self):
        """The training forward's attention kernel for the duration of an update (eager on CPU:
        it trains faster than SDPA's flash backward there, while SDPA decodes faster, so rollouts
        keep the model's own)."""
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

    # ------------------------------------------------------------------ checkpoints + loop
    def save(self, step: int) -> None:
        from tagrpo.train.checkpoint import save_checkpoint

        self.acc.wait_for_everyone()
        if self.acc.is_main_process:
            save_checkpoint(self.run_dir, step, self.acc.unwrap_model(self.model), self.tokenizer, self.optimizer, self.scheduler,
                            {"sampled_tokens": self.sampled_tokens, "nonfinite_skips": self.nonfinite_skips},
                            keep=self.cfg.keep_checkpoints)
        self.acc.wait_for_everyone()

    def save_final(self) -> Path:
        from tagrpo._fs import atomic_directory

        out = self.run_dir / "final"
        self.acc.wait_for_everyone()
        if self.acc.is_main_process:
            model = self.acc.unwrap_model(self.model)
            if self.cfg.lora:
                model = copy.deepcopy(model).merge_and_unload()
            with atomic_directory(out) as tmp:
                model.save_pretrained(tmp, safe_serialization=True)
                self.tokenizer.save_pretrained(tmp)
        self.acc.wait_for_everyone()
        return out

    def _install_signal_handlers(self) -> dict:
        def handler(signum, frame):
            self._stop = True
            self._say(f"[yellow]signal {signum}: finishing this step, saving a checkpoint, then exiting[/yellow]")

        old = {}
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(ValueError):  # not the main thread
                old[sig] = signal.signal(sig, handler)
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
                if self.log is not None:
                    self.log.log(last)
                if msg := self.anchor_watch.update(last):
                    self._say(f"[yellow]{msg}[/yellow]")
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
            if self.log is not None:
                self.log.close()
        return last
