"""The parts of the TRL integration that do not subclass TRL: where each row of a generation
batch sits in its family, neighbor prompts and their checks, and the family / q0 metrics.
Used by `_trl_trainer`; pure functions except `check_trl_version` (reads TRL's version).
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch
import trl
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from tagrpo.core import uniform_fraction
from tagrpo.errors import TagrpoError
from tagrpo.integrations._trl_version import SUPPORTED_TRL


class TAGRPOConfigError(TagrpoError, ValueError):
    """A TA-GRPO configuration or dataset problem the user can fix (also a ValueError)."""


def check_trl_version(version: str | None = None) -> None:
    """Raise TAGRPOConfigError if the TRL version (default: the installed one) is outside
    `SUPPORTED_TRL`. The trainer relies on private `GRPOTrainer` methods that change between
    TRL releases, so other versions are refused rather than silently mis-trained."""
    version = trl.__version__ if version is None else version
    if not SpecifierSet(SUPPORTED_TRL).contains(Version(version), prereleases=True):
        raise TAGRPOConfigError(
            f"tagrpo's TRL integration supports trl{SUPPORTED_TRL}, but trl {version} is installed. "
            f"Install a supported version: pip install 'trl{SUPPORTED_TRL}'  (or pip install 'tagrpo[trl]')."
        )


# --------------------------------------------------------------------------------------------
# Pure helpers (no trainer state): layout of a family, neighbor prompts, metrics.
# --------------------------------------------------------------------------------------------


def variant_indices(
    n_rows: int, offset: int, num_neighbors: int, samples_per_variant: int
) -> list[int]:
    """Variant (0 = original, i = neighbor i) of each of `n_rows` rows whose first row sits at
    position `offset` of the global generation batch: [0]*G + [1]*G + ... + [N]*G per family."""
    family = (num_neighbors + 1) * samples_per_variant
    return [((offset + j) % family) // samples_per_variant for j in range(n_rows)]


def is_conversational_prompt(prompt: Any) -> bool:
    return isinstance(prompt, list) and all(isinstance(m, dict) and "role" in m for m in prompt)


def check_neighbors(neighbors: Any, prompt: Any, num_neighbors: int, where: str) -> None:
    """Raise TAGRPOConfigError unless `neighbors` holds >= num_neighbors usable rewordings."""
    need = (
        f"a list of at least num_neighbors={num_neighbors} non-empty strings (problem-equivalent "
        "rewordings of the question; `tagrpo neighbors` makes them)"
    )
    if neighbors is None:
        raise TAGRPOConfigError(f"{where}: field 'neighbors' is missing (None); expected {need}.")
    if isinstance(neighbors, str) or not isinstance(neighbors, (list, tuple)):
        raise TAGRPOConfigError(
            f"{where}: field 'neighbors' is a {type(neighbors).__name__}; expected {need}."
        )
    if len(neighbors) < num_neighbors:
        raise TAGRPOConfigError(
            f"{where}: field 'neighbors' holds {len(neighbors)} rewording(s); expected {need}. "
            f"Lower num_neighbors or make more neighbors for this row."
        )
    for k, nb in enumerate(neighbors[:num_neighbors]):
        if isinstance(nb, str):
            if not nb.strip():
                raise TAGRPOConfigError(
                    f"{where}: field 'neighbors'[{k}] is an empty string; expected {need}."
                )
        elif is_conversational_prompt(nb) and is_conversational_prompt(prompt):
            continue
        else:
            raise TAGRPOConfigError(
                f"{where}: field 'neighbors'[{k}] is a {type(nb).__name__}; expected a str (or, for "
                "conversational prompts, a full list of {'role', 'content'} messages)."
            )


def variant_prompt(prompt: Any, neighbor: Any, question: str | None = None) -> Any:
    """The prompt to generate from for one neighbor, in the same format as `prompt`.

    - `neighbor` is a list of messages (conversational datasets): used as it is.
    - `neighbor` is a str and the row has a `question` (str) that occurs in the prompt text (the
      last user message for conversational prompts): that occurrence is replaced, so a template
      around the question (instructions, "put the answer in \\boxed{}") is kept.
    - otherwise the neighbor replaces the last user message's content (conversational) or the
      whole prompt (plain-text prompts).
    """
    if not isinstance(neighbor, str):
        return copy.deepcopy(neighbor)
    if isinstance(prompt, str):
        if question and question in prompt:
            return prompt.replace(question, neighbor, 1)
        return neighbor
    messages = copy.deepcopy(prompt)
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    if not users:
        raise TAGRPOConfigError(
            "TAGRPOTrainer: a conversational prompt has no 'user' message to reword; roles found: "
            f"{[m.get('role') for m in messages]}. Give neighbors as full message lists instead."
        )
    last = users[-1]
    content = messages[last]["content"]
    if not isinstance(content, str):
        raise TAGRPOConfigError(
            "TAGRPOTrainer: the last user message's content is not a str (multimodal content "
            "blocks?); give neighbors as full message lists instead."
        )
    new = content.replace(question, neighbor, 1) if question and question in content else neighbor
    messages[last] = {**messages[last], "content": new}
    return messages


def family_reward_metrics(
    rewards: torch.Tensor, num_neighbors: int, samples_per_variant: int
) -> dict[str, float]:
    """Uniform-group fractions in the GRPO view (q0's G rewards per family) and the TA-GRPO view
    (all (N+1)*G rewards), plus mean rewards of q0 and neighbor completions.

    rewards: (B,) for a whole generation batch in TRL's order (B a multiple of (N+1)*G); NaN
    (unscorable) rows are left out."""
    family_size = (num_neighbors + 1) * samples_per_variant
    if rewards.dim() != 1 or rewards.numel() % family_size != 0:
        raise ValueError(
            f"rewards has shape {tuple(rewards.shape)}; expected (B,) with B a multiple of {family_size}"
        )
    pos = torch.arange(rewards.numel(), device=rewards.device)  # (B,)
    family = pos // family_size  # (B,)
    variant = (pos % family_size) // samples_per_variant  # (B,)
    ok = ~torch.isnan(rewards)  # (B,)
    q0 = ok & (variant == 0)  # (B,)
    nb = ok & (variant > 0)  # (B,)
    metrics: dict[str, float] = {}
    for view, mask in (("q0", q0), ("family", ok)):
        u = uniform_fraction(rewards[mask].float().cpu(), family[mask].cpu())
        for key in ("uniform", "all_correct", "all_wrong"):
            metrics[f"uniform/{view}_{key}"] = u[key]
    metrics["rewards/q0_mean"] = rewards[q0].float().mean().item() if q0.any() else math.nan
    if num_neighbors > 0:
        metrics["rewards/neighbors_mean"] = (
            rewards[nb].float().mean().item() if nb.any() else math.nan
        )
    return metrics


def q0_sampling_metrics(
    old_logps: torch.Tensor,
    sampling_logps: torch.Tensor,
    is_ratio: torch.Tensor,
    mask: torch.Tensor,
    is_q0: torch.Tensor,
    sequence_level: bool,
) -> dict[str, torch.Tensor]:
    """TRL's sampler-vs-trainer metrics (`sampling/...`) for one process, over q0 rows only.

    old_logps, sampling_logps: (B, T) trainer and sampler log-probs of the sampled tokens;
    is_ratio: TRL's vLLM importance-sampling ratio after truncation/masking, (B, T), or (B, 1)
    when `sequence_level`; mask: (B, T) bool, the completion tokens; is_q0: (B,) bool. As in TRL,
    tokens the sampler could not score (NaN) are left out of the log-prob difference, while their
    ratio (1) is counted. Returns 0-dim tensors keyed like TRL's metrics without the `sampling/`
    prefix; NaN where no q0 token is left (TRL writes 0 there, which would bias the cross-process
    mean)."""
    q0_tokens = mask & is_q0.unsqueeze(1)  # (B, T)
    delta = (old_logps - sampling_logps).abs()  # (B, T)
    delta = delta[q0_tokens & ~torch.isnan(delta)]  # (K,)
    ratio = is_ratio[is_q0].flatten() if sequence_level else is_ratio[q0_tokens]  # (K',)
    nan = torch.tensor(math.nan, device=old_logps.device)

    def stat(values: torch.Tensor, how: str) -> torch.Tensor:
        return getattr(values, how)() if values.numel() else nan

    return {
        "sampling_logp_difference/mean": stat(delta, "mean"),
        "sampling_logp_difference/max": stat(delta, "max"),
        "importance_sampling_ratio/min": stat(ratio, "min"),
        "importance_sampling_ratio/mean": stat(ratio, "mean"),
        "importance_sampling_ratio/max": stat(ratio, "max"),
    }


# --------------------------------------------------------------------------------------------
# Config
# --------------------------------------------------------------------------------------------


def check_dataset(dataset, num_neighbors: int) -> None:
    """A TAGRPOTrainer train dataset: present, text prompts, and (N > 0) a `neighbors` column whose
    every row holds at least N rewordings (an IterableDataset without known columns is checked per batch)."""
    if dataset is None:
        raise TAGRPOConfigError(
            "TAGRPOTrainer needs a train_dataset with 'prompt' and 'neighbors' columns."
        )
    columns = getattr(dataset, "column_names", None)
    if columns is None:  # an IterableDataset with unknown features: rows are checked per batch
        return
    if "image" in columns or "images" in columns:
        raise TAGRPOConfigError(
            f"TAGRPOTrainer: train_dataset has image columns ({[c for c in columns if c in ('image', 'images')]}); "
            "neighbors are text rewordings, so multimodal prompts are not supported."
        )
    if "prompt" not in columns:
        raise TAGRPOConfigError(
            f"TAGRPOTrainer: train_dataset has no 'prompt' column; columns: {columns}."
        )
    if num_neighbors == 0:
        return
    if "neighbors" not in columns:
        raise TAGRPOConfigError(
            f"TAGRPOTrainer: train_dataset has no 'neighbors' column (columns: {columns}); with "
            f"num_neighbors={num_neighbors} every row needs a list of at least {num_neighbors} rewordings "
            "(`tagrpo neighbors` adds them), or set num_neighbors=0 for plain GRPO."
        )
    if hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__"):
        for idx, (prompt, nbs) in enumerate(
            zip(dataset["prompt"], dataset["neighbors"], strict=True)
        ):
            check_neighbors(nbs, prompt, num_neighbors, f"train_dataset row {idx}")
