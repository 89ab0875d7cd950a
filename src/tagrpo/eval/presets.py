"""Evaluation presets (`tagrpo eval --preset NAME`): named sets of the sampling, pass@k and prompt
settings, so that a table can be made "the way the paper did" with one flag.

- no preset: the CPU-sized defaults (n=4, k=1,2,4, T=0.6, top-p 0.95, 256 new tokens, the
  question inside the model's chat template).
- `paper`: the TA-GRPO authors' evaluation scripts: n=128 samples, T=0.6, top-p 0.95, 3,072 new
  tokens, unbiased pass@k for k = 1, 2, 4, ..., 128, the prompt as raw text without the chat
  template. Scoring is the same as without a preset: the last `\\boxed{}` of a response compared
  with the gold answer by `tagrpo.rewards.math_reward` (exact numbers first, math-verify as the
  fallback).

Explicit flags override a preset's values. When --k is not given, a preset whose `k` is None
uses the powers of two up to n, so `--preset paper --n 16` gives k = 1, 2, 4, 8, 16. The same
settings are used for GRPO and TA-GRPO checkpoints alike: only the policy changes between columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tagrpo.errors import TagrpoError
from tagrpo.eval.summary import check_ks, parse_ks


@dataclass(frozen=True)
class EvalPreset:
    """One preset; every field is what `tagrpo eval` uses when its flag is not given."""

    name: str
    n: int  # --n: samples per question
    k: tuple[int, ...] | None  # --k: pass@k list; None = powers of two up to n
    temperature: float  # --temperature
    top_p: float  # --top-p
    max_new_tokens: int  # --max-new-tokens: response budget in tokens
    chat_template: bool  # --chat-template / --no-chat-template: False = raw-text prompt
    description: str = ""


DEFAULT_PRESET = EvalPreset(
    "default", n=4, k=(1, 2, 4), temperature=0.6, top_p=0.95, max_new_tokens=256, chat_template=True,
    description="CPU-sized defaults (no --preset)",
)
PRESETS: dict[str, EvalPreset] = {
    p.name: p
    for p in (
        EvalPreset(
            "paper", n=128, k=None, temperature=0.6, top_p=0.95, max_new_tokens=3072, chat_template=False,
            description="the TA-GRPO paper's evaluation: n=128, T=0.6, top-p 0.95, 3072 new tokens, "
                        "pass@1..128, raw-text prompt (no chat template), last \\boxed{} with math-verify",
        ),
    )
}


def powers_of_two(n: int) -> list[int]:
    """[1, 2, 4, ...] up to and including the largest power of two <= n."""
    out, k = [], 1
    while k <= n:
        out.append(k)
        k *= 2
    return out


def get_preset(name: str | None) -> EvalPreset:
    """The preset called `name` (case-insensitive); None gives the defaults."""
    if name is None:
        return DEFAULT_PRESET
    key = name.strip().lower()
    if key not in PRESETS:
        raise TagrpoError(f"--preset {name!r} is not a preset; choose one of {', '.join(PRESETS)}")
    return PRESETS[key]


def check_system(system: str | None, chat_template: bool) -> None:
    """A system message is a chat-template turn: refuse one with a raw-text prompt."""
    if system and not chat_template:
        raise TagrpoError("--system needs the chat template: drop --system, or add --chat-template "
                          "(raw-text prompts, e.g. --preset paper, have no system turn)")


def resolve_eval_settings(
    preset: str | None = None,
    *,
    n: int | None = None,
    k: str | Sequence[int] | None = None,
    temperature: float | None = None,
    top_p: float | None = None,
    max_new_tokens: int | None = None,
    chat_template: bool | None = None,
) -> dict:
    """The settings `tagrpo eval` runs with: each given (not None) value, else the preset's.

    Returns {"preset", "n", "k" (sorted list), "temperature", "top_p", "max_new_tokens",
    "chat_template"}. Refuses, naming the flag and the value: n < 1, a k > n (naming both), a
    temperature <= 0 (the n samples would be identical), top-p outside (0, 1], max-new-tokens < 1.
    """
    p = get_preset(preset)
    n = p.n if n is None else int(n)
    if n < 1:
        raise TagrpoError(f"--n must be >= 1, got {n}")
    if k is not None:
        ks = parse_ks(k)
    else:
        ks = list(p.k) if p.k is not None else powers_of_two(n)
    check_ks(ks, n)
    temperature = p.temperature if temperature is None else float(temperature)
    if temperature == 0:
        raise TagrpoError("--temperature 0 makes the n samples identical; use --greedy for greedy accuracy and T > 0 for pass@k")
    if temperature < 0:
        raise TagrpoError(f"--temperature must be > 0, got {temperature}")
    top_p = p.top_p if top_p is None else float(top_p)
    if not 0 < top_p <= 1:
        raise TagrpoError(f"--top-p must be in (0, 1], got {top_p}")
    max_new_tokens = p.max_new_tokens if max_new_tokens is None else int(max_new_tokens)
    if max_new_tokens < 1:
        raise TagrpoError(f"--max-new-tokens must be >= 1, got {max_new_tokens}")
    return {
        "preset": None if preset is None else p.name,
        "n": n,
        "k": ks,
        "temperature": temperature,
        "top_p": top_p,
        "max_new_tokens": max_new_tokens,
        "chat_template": p.chat_template if chat_template is None else bool(chat_template),
    }

