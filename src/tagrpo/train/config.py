"""One typed training config: a dataclass whose fields are documented, loaded from YAML with
`--set key=value` overrides and validated at load time (unknown key, wrong type, invalid value).

The algorithm switch (`algorithm`) selects GRPO, matched-budget GRPO, TA-GRPO or an ablation;
everything else is the same code path.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tagrpo.errors import TagrpoError

ALGORITHMS = ("grpo", "grpo-matched", "ta-grpo", "ta-grpo-unanchored", "ta-grpo-separate")
AUGMENT = ("always", "on-uniform")
SCHEDULES = ("cosine", "constant", "linear")
AUTOCAST = ("auto", "bf16", "none")
NEIGHBOR_SOURCES = ("auto", "column", "rules", "generator")
DEVICES = ("auto", "cpu", "cuda")
OPTIMIZER_STATES = ("fp32", "bf16")
BF16_ADAMW_KERNELS = ("auto", "fused", "eager")
CHECKPOINT_MODES = ("full", "selective")


def doc(text: str, default):
    return field(default=default, metadata={"help": text})


@dataclass
class TrainConfig:
    # --- run -----------------------------------------------------------------------------
    output_dir: str = doc("Run directory (config.yaml, metrics.jsonl, tb/, checkpoints/, final/).", "runs/ta-grpo")
    seed: int = doc("Seed for data order, sampling and initialization.", 0)
    steps: int = doc("Number of training steps (one rollout batch + update each).", 10)
    # --- model ---------------------------------------------------------------------------
    model: str = doc("Policy: 'smollm2-135m-instruct' (embedded), a HF id, a local path, or 'tiny' (random, tests).", "smollm2-135m-instruct")
    lora: bool = doc("Train LoRA adapters (peft) instead of all weights.", False)
    lora_r: int = doc("LoRA rank.", 16)
    lora_alpha: int = doc("LoRA alpha.", 32)
    lora_dropout: float = doc("LoRA dropout.", 0.0)
    lora_target_modules: str = doc("Comma-separated module names, or 'all-linear'.", "all-linear")
    autocast: str = doc("bf16 autocast for the training forward/backward, and bf16 rollouts ('bf16'), fp32 ('none'), or "
                        "'auto': bf16 where the device has fast bf16 matmuls (CUDA with bf16 support; a CPU with "
                        "bf16 units: AMX, AVX512_BF16, Arm BF16), fp32 elsewhere (without them bf16 matmuls run in "
                        "software: ~5x slower than fp32 on AVX-512, ~200x on AVX2).", "auto")
    device: str = doc("Device of the policy, the reference, rollouts and every tensor of the step: 'auto' (CUDA when "
                      "present, else CPU), 'cpu' or 'cuda' (under `accelerate launch`, each process's own GPU).", "auto")
    threads: int = doc("torch.set_num_threads (0 = leave torch's default).", 0)
    attn_implementation: str = doc("Attention kernel of the policy's update: 'auto' (on CPU 'tagrpo_eager': eager, which "
                                   "trains ~1.3x faster than SDPA's flash backward at these lengths, with the packed shared "
                                   "prefix computed block by block; the model's default on GPU), 'eager', 'sdpa', "
                                   "'tagrpo_eager', or any name transformers accepts.", "auto")
    keep_freed_memory: bool = doc("Linux/glibc: keep freed memory in the process (no mmap per large tensor, no trimming) so "
                                  "each step reuses its pages instead of page-faulting them again (~1.5x faster updates "
                                  "on CPU; the resident size stays at its peak).", True)
    # --- algorithm -----------------------------------------------------------------------
    algorithm: str = doc(f"One of {', '.join(ALGORITHMS)}.", "ta-grpo")
    augment: str = doc("TA-GRPO: 'always' sample neighbors; 'on-uniform' only when q0's G rewards are uniform.", "always")
    filter_uniform: bool = doc("DAPO-style: drop uniform groups (uniform families for TA-GRPO) from the update.", False)
    num_neighbors: int = doc("N: neighbors per question (TA-GRPO variants; grpo-matched samples (N+1)*G of q0).", 3)
    samples_per_variant: int = doc("G: responses sampled per prompt variant.", 4)
    questions_per_step: int = doc("Families (questions) per step, across all processes.", 4)
    adv_scale: str = doc("Advantage scaling: 'group' (std of the group), 'batch', or 'none'.", "group")
    adv_eps: float = doc("eps added to the std in the advantage.", 1e-6)
    clip_low: float = doc("PPO clip epsilon below 1 (ratio >= 1 - clip_low).", 0.2)
    clip_high: float = doc("PPO clip epsilon above 1 (clip-higher when > clip_low).", 0.2)
    beta: float = doc("KL (k3) coefficient against the reference model; 0 disables the reference model.", 0.001)
    agg: str = doc("Loss aggregation: token-mean, seq-mean-token-mean, seq-mean-token-sum-norm (T = max_new_tokens).", "token-mean")
    ppo_epochs: int = doc("mu: optimizer passes over each rollout batch (old log-probs stored when > 1).", 1)
    num_mini_batches: int = doc("Optimizer steps per PPO epoch (the batch is split into this many mini-batches).", 1)
    # --- data ----------------------------------------------------------------------------
    train_data: str = doc("'arith' (built-in generator) or a .jsonl/.parquet file with question/answer (and neighbors).", "arith")
    question_field: str = doc("Question field name ('' = auto: question/problem).", "")
    answer_field: str = doc("Answer field name ('' = auto: answer/solution).", "")
    arith_difficulty: int = doc("Built-in generator difficulty 1..5 (number of operations).", 2)
    arith_size: int = doc("Number of built-in training problems.", 512)
    neighbors: str = doc("Neighbor source: 'column' (dataset's neighbors), 'rules' (rule backend), 'generator' (the arithmetic "
                         "generator restates each problem in N distinct training forms, exactly answer-preserving; rows need "
                         "its `structure`, as train_data: arith has), 'auto' (column if present, else rules).", "auto")
    prompt_template: str = doc("User turn template; {question} is replaced.", "{question}\nPut your final answer within \\boxed{{}}.")
    system_prompt: str = doc("System message ('' = none / the chat template's default).", "")
    max_prompt_tokens: int = doc("Longer prompts are reported and skipped, never truncated.", 512)
    # --- rollout -------------------------------------------------------------------------
    max_new_tokens: int = doc("Response budget in tokens.", 128)
    temperature: float = doc("Rollout sampling temperature.", 1.0)
    top_p: float = doc("Rollout nucleus sampling.", 1.0)
    generate_batch_size: int = doc("Max rows per generate call (families are never split across calls).", 64)
    # --- optimization --------------------------------------------------------------------
    lr: float = doc("AdamW peak learning rate.", 1e-6)
    weight_decay: float = doc("AdamW weight decay.", 0.0)
    adam_beta1: float = doc("AdamW beta1.", 0.9)
    adam_beta2: float = doc("AdamW beta2.", 0.999)
    optimizer_state: str = doc("dtype of the AdamW moments: fp32 (torch's fused AdamW) or bf16 (4 bytes a parameter "
                               "instead of 8, stochastically rounded; train/optim.py; see bf16_adamw_kernel).", "fp32")
    bf16_adamw_kernel: str = doc("How optimizer_state: bf16 runs its step: fused (one torch.compile kernel, ~5x faster "
                                 "than eager, built once per process in ~5-10 s on a CPU), eager (plain tensor ops) or auto "
                                 "(fused when the run's updates x trainable parameters reach 2e9, where the build pays "
                                 "for itself: 15 updates of a 135M model; else eager).", "auto")
    schedule: str = doc("LR schedule after warm-up: cosine, linear or constant.", "cosine")
    warmup_ratio: float = doc("Fraction of steps of linear warm-up.", 0.1)
    max_grad_norm: float = doc("Gradient clipping norm (0 = off).", 1.0)
    shared_prefix: bool = doc("Run each shared prompt (the anchor q0 of a family) once per micro-batch and reuse its KV "
                              "cache for all its responses, gradients included (with the tagrpo_eager kernel, CPU's default, under "
                              "gradient checkpointing or with several processes: one forward a prompt with its responses in blocks, "
                              "block by block or under a block mask with eager/SDPA attention).", True)
    gradient_checkpointing: bool = doc("Recompute each decoder layer's activations in backward instead of keeping them "
                                       "(transformers' activation checkpointing): activation memory drops from ~1.6 MB to "
                                       "~0.1 MB per token for SmolLM2-135M, the update costs ~1/3 more compute. A KV cache "
                                       "cannot be checkpointed, so the shared prefix runs as one forward a prompt with its "
                                       "responses in blocks under a block mask (eager/SDPA attention; other kernels: full rows).",
                                       False)
    gradient_checkpointing_mode: str = doc("What gradient checkpointing recomputes: full (every decoder layer; the least "
                                           "memory) or selective (the MLPs of lean_layers keep their input, gate and up "
                                           "for backward, so only attention and norms are recomputed, not the MLP's "
                                           "three products (3/4 of a SmolLM2 layer's weight FLOPs), for h + 2f more "
                                           "saved values per token and layer, 7.3 KB in bf16 for SmolLM2-135M; MLPs "
                                           "that lean_layers does not cover are recomputed in full). "
                                           "Measured in benchmarks/memory/RESULTS.md (session 20).", "full")
    lean_layers: bool = doc("Llama-family MLP (SwiGLU) and RMSNorm layers whose backward keeps only what it needs and "
                            "recomputes silu(gate)*up and the normalized input (train/lean_layers.py): the same forward "
                            "bit for bit, 1/3 less saved activation memory in the update (SmolLM2-135M: 1.50 -> 1.01 MB "
                            "a token in fp32, 1.21 -> 0.82 in bf16; forward+backward no slower: "
                            "benchmarks/memory/lean_layers_bench.py). Other architectures and LoRA-wrapped projections "
                            "keep transformers' layers.", True)
    skip_zero_adv: bool = doc("With beta = 0, skip the forward/backward of responses whose advantage is 0 (exactly the "
                              "same update; uniform groups then cost nothing to train).", True)
    micro_batch_tokens: int = doc("Token budget per micro-batch (rows x padded length) for gradient accumulation.", 4096)
    # --- rewards -------------------------------------------------------------------------
    reward: str = doc("Reward callable by dotted path 'module:function' taking (completion, answer) -> float.", "tagrpo.rewards:math_reward")
    reward_timeout: float = doc("Seconds a plug-in reward may take per completion before it scores 0.", 10.0)
    # --- logging / checkpoints -----------------------------------------------------------
    save_every: int = doc("Checkpoint every K steps (0 = only at the end).", 0)
    keep_checkpoints: int = doc("Keep the last K checkpoints.", 2)
    tensorboard: bool = doc("Write TensorBoard events to RUN_DIR/tb.", True)
    wandb: bool = doc("Log to Weights & Biases (needs `wandb` installed).", False)
    wandb_project: str = doc("W&B project name.", "tagrpo")
    diversity_every: int = doc("Log diversity/mean_pairwise_distance every K steps (0 = off).", 0)
    save_final: bool = doc("Write final/ in Hugging Face format at the end.", True)

    def validate(self, world_size: int = 1) -> "TrainConfig":
        def bad(key: str, msg: str):
            raise TagrpoError(f"config field '{key}': {msg}")

        for key, choices in (("algorithm", ALGORITHMS), ("augment", AUGMENT), ("schedule", SCHEDULES),
                             ("autocast", AUTOCAST), ("neighbors", NEIGHBOR_SOURCES), ("device", DEVICES),
                             ("optimizer_state", OPTIMIZER_STATES), ("bf16_adamw_kernel", BF16_ADAMW_KERNELS),
                             ("gradient_checkpointing_mode", CHECKPOINT_MODES)):
            if getattr(self, key) not in choices:
                bad(key, f"{getattr(self, key)!r} is not valid; choose one of {', '.join(choices)}")
        from tagrpo.core import AGGREGATIONS, SCALES

        if self.agg not in AGGREGATIONS:
            bad("agg", f"{self.agg!r} is not valid; choose one of {', '.join(AGGREGATIONS)}")
        if self.adv_scale not in SCALES:
            bad("adv_scale", f"{self.adv_scale!r} is not valid; choose one of {', '.join(SCALES)}")
        for key in ("steps", "samples_per_variant", "questions_per_step", "ppo_epochs", "num_mini_batches",
                    "max_new_tokens", "generate_batch_size", "micro_batch_tokens", "max_prompt_tokens", "keep_checkpoints"):
            if getattr(self, key) < 1:
                bad(key, f"must be >= 1, got {getattr(self, key)}")
        for key in ("num_neighbors", "save_every", "diversity_every", "threads", "beta", "lr", "weight_decay", "max_grad_norm"):
            if getattr(self, key) < 0:
                bad(key, f"must be >= 0, got {getattr(self, key)}")
        if not 0 <= self.warmup_ratio < 1:
            bad("warmup_ratio", f"must be in [0, 1), got {self.warmup_ratio}")
        if not 1 <= self.arith_difficulty <= 5:
            bad("arith_difficulty", f"must be in 1..5, got {self.arith_difficulty}")
        if self.neighbors == "generator" and self.uses_neighbors:
            from tagrpo.data.arith_forms import NEIGHBOR_FORMS

            if self.num_neighbors > len(NEIGHBOR_FORMS):
                bad("num_neighbors", f"neighbors: generator has {len(NEIGHBOR_FORMS)} training forms "
                    f"({', '.join(NEIGHBOR_FORMS)}), so at most {len(NEIGHBOR_FORMS)} distinct neighbors; got {self.num_neighbors}")
        if self.temperature <= 0:
            bad("temperature", f"rollouts sample; must be > 0, got {self.temperature}")
        if self.algorithm in ("grpo-matched", "ta-grpo", "ta-grpo-unanchored", "ta-grpo-separate") and self.num_neighbors < 1:
            if self.algorithm != "ta-grpo":
                bad("num_neighbors", f"{self.algorithm} needs N >= 1 neighbors, got {self.num_neighbors}")
        if self.augment == "on-uniform" and not self.algorithm.startswith("ta-grpo"):
            bad("augment", f"'on-uniform' applies to TA-GRPO algorithms, not {self.algorithm!r}")
        if self.adv_scale == "batch" and world_size > 1:
            bad("adv_scale", f"'batch' normalizes over the whole batch, which {world_size} processes do not share; "
                "use group or none, or run on one process")
        if self.questions_per_step % world_size:
            bad("questions_per_step", f"{self.questions_per_step} families do not split evenly over {world_size} processes; "
                "families are never split, so make it a multiple of the process count")
        if self.family_size > self.generate_batch_size:
            bad("generate_batch_size", f"{self.generate_batch_size} rows cannot hold one whole family of "
                f"{self.family_size} ((N+1)*G); raise it to at least {self.family_size}")
        if self.num_mini_batches > self.questions_per_step // world_size:
            bad("num_mini_batches", f"{self.num_mini_batches} mini-batches but only {self.questions_per_step // world_size} families per process")
        return self

    def warnings(self) -> list[str]:
        """Valid but probably unintended settings, said at the start of a run."""
        out = []
        if self.gradient_checkpointing_mode == "selective" and not self.gradient_checkpointing:
            out.append("config: gradient_checkpointing_mode: selective has no effect without gradient_checkpointing: true")
        elif self.gradient_checkpointing_mode == "selective" and not self.lean_layers:
            out.append("config: gradient_checkpointing_mode: selective keeps the MLPs of lean_layers, which is off: "
                       "every layer is recomputed in full")
        if self.algorithm == "ta-grpo" and self.num_neighbors == 0:
            out.append("config: algorithm ta-grpo with num_neighbors: 0 samples q0 only, which is plain GRPO "
                       "(set num_neighbors >= 1 for TA-GRPO, or algorithm: grpo)")
        return out

    @property
    def uses_neighbors(self) -> bool:
        return self.algorithm in ("ta-grpo", "ta-grpo-unanchored", "ta-grpo-separate") and self.num_neighbors > 0

    @property
    def family_size(self) -> int:
        """(N+1)*G responses per family (G for plain GRPO)."""
        if self.algorithm == "grpo":
            return self.samples_per_variant
        return (self.num_neighbors + 1) * self.samples_per_variant

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


FIELDS = {f.name: f for f in dataclasses.fields(TrainConfig)}


def _coerce(key: str, value, where: str):
    typ = typing.get_type_hints(TrainConfig)[key]
    origin = typing.get_origin(typ)
    if origin in (typing.Union, types.UnionType):
        typ = next(a for a in typing.get_args(typ) if a is not type(None))
    if typ is bool:
        if isinstance(value, bool):
            return value
        raise TagrpoError(f"{where}: config field '{key}' must be true or false, got {value!r}")
    if typ is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise TagrpoError(f"{where}: config field '{key}' must be an integer, got {value!r}")
        return value
    if typ is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            if isinstance(value, str):
                try:
                    return float(value)
                except ValueError:
                    pass
            raise TagrpoError(f"{where}: config field '{key}' must be a number, got {value!r}")
        return float(value)
    if typ is str:
        if value is None:
            return ""
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise TagrpoError(f"{where}: config field '{key}' must be a string, got {value!r}")
        return str(value)
    return value


def _check_key(key: str, where: str) -> None:
    if key not in FIELDS:
        close = difflib.get_close_matches(key, FIELDS, n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else " Valid keys are listed by `tagrpo train --help-config`."
        raise TagrpoError(f"{where}: unknown config key '{key}'.{hint}")


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = (), world_size: int = 1) -> TrainConfig:
    """Read YAML (flat mapping of TrainConfig fields), apply `key=value` overrides, validate."""
    values: dict = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise TagrpoError(f"config file {p} does not exist")
        try:
            data = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as e:
            raise TagrpoError(f"{p}: not valid YAML: {e}") from None
        if not isinstance(data, dict):
            raise TagrpoError(f"{p}: the config must be a mapping of field: value, got {type(data).__name__}")
        for k, v in data.items():
            _check_key(str(k), str(p))
            values[k] = _coerce(k, v, str(p))
    for ov in overrides:
        if "=" not in ov:
            raise TagrpoError(f"--set {ov!r}: expected key=value")
        k, raw = ov.split("=", 1)
        k = k.strip()
        _check_key(k, f"--set {ov}")
        try:
            v = yaml.safe_load(raw) if raw != "" else ""
        except yaml.YAMLError:
            v = raw
        if FIELDS[k].type in ("str", str) and not isinstance(v, str):
            v = raw
        values[k] = _coerce(k, v, f"--set {ov}")
    return TrainConfig(**values).validate(world_size)


def dump_config(cfg: TrainConfig, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))


def describe_fields() -> str:
    """Every field with its default and help (for `tagrpo train --help-config`)."""
    lines = []
    for f in dataclasses.fields(TrainConfig):
        lines.append(f"{f.name} (default {f.default!r}): {f.metadata.get('help', '')}")
    return "\n".join(lines)
