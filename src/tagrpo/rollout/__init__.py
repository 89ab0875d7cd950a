"""Rollouts: sampling completions behind one interface (`RolloutEngine`).

`HFGenerateEngine` wraps transformers `generate` (left padding, EOS stop, exact token ids kept);
a vLLM engine can implement the same `generate` method later. Prompt ids come from
`build_prompt_ids`, which applies the model's chat template.
"""

from tagrpo.rollout.base import Completion, RolloutEngine, SamplingParams
from tagrpo.rollout.hf import HFGenerateEngine
from tagrpo.rollout.prompts import DEFAULT_PROMPT_TEMPLATE, build_prompt_ids

__all__ = [
    "DEFAULT_PROMPT_TEMPLATE",
    "Completion",
    "HFGenerateEngine",
    "RolloutEngine",
    "SamplingParams",
    "build_prompt_ids",
]
