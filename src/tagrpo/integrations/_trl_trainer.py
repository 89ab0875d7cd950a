"""TA-GRPO on top of Hugging Face TRL's `GRPOTrainer` (imported lazily by `tagrpo.integrations.trl`).

How it differs from plain TRL GRPO:

1. `TAGRPOConfig` adds `num_neighbors` (N) and `samples_per_variant` (G) and sets TRL's
   `num_generations` to the family size (N+1)*G. TRL's `RepeatSampler` then repeats each dataset
   row (N+1)*G times in a row, so one question's whole family sits contiguously in a generation
   batch.
2. Generation: inside each family, the i-th block of G rows is generated from neighbor i
   (block 0 from the original prompt q0). Row position -> variant is `(pos % ((N+1)*G)) // G`,
   with `pos` the row's index in the *global* generation batch, the same positional grouping TRL
   uses for its advantages.
3. Anchored log-probs: right after generation the prompt token ids of every neighbor row are
   replaced by the tokens of q0. Everything TRL computes afterwards (old-policy log-probs,
   reference log-probs for the KL, current log-probs in the loss) reads these ids, so every
   log-probability is log pi(o | q0) whichever variant generated o.
4. Joint advantage: TRL normalizes rewards over groups of `num_generations` consecutive rows,
   which here is the family of (N+1)*G completions. Nothing to override.
5. Reward functions get the original prompt (TRL passes its own copy of the batch prompts, which
   this trainer never rewrites) and every dataset column, as usual (plus `neighbors`).
6. Logs `uniform/q0_{uniform,all_correct,all_wrong}` (the plain GRPO view: q0's G rewards) and
   `uniform/family_*` (the TA-GRPO view: all (N+1)*G rewards) from `tagrpo.core.uniform_fraction`,
   plus `rewards/q0_mean` and `rewards/neighbors_mean`, through TRL's metric logging, and a
   `ta_variant` column in TRL's completions table.

TRL methods overridden (TRL 1.16; private methods, hence the pinned version range):

- `__init__`: checks the TRL version, the config type and the dataset's `neighbors` column;
  refuses `tools`, `environment_factory` and image datasets (multi-turn rollouts rewrite prompts
  between turns and neighbors are text only, so "the same answer to a reworded prompt" is not
  defined there).
- `_generate_and_score_completions`: stashes the batch rows (to find each row's neighbors), runs
  TRL's unchanged, then post-processes its output dict when the sampler returned log-probs:
  anchored sampler log-probs for neighbor rows and q0-only `sampling/*` metrics (below).
- `_generate`: builds the neighbor prompts, calls TRL's generation on them, then puts q0's
  prompt ids back (point 3) and puts NaN placeholders in the sampler log-probs of neighbor rows
  (below).
- `_generate_single_turn`: passes G instead of (N+1)*G as "completions per prompt". vLLM server
  mode deduplicates prompts with `prompts[::num_generations]` and samples that many of each;
  with (N+1)*G it would keep only q0 and drop every neighbor.
- `_calculate_rewards`: TRL's, plus the metrics of point 6.

Evaluation (`trainer.evaluate()`) generates from q0 only: it measures the policy on the task.

Sampler log-probs of neighbor rows (only when the sampler returns log-probs: vLLM, or a
`rollout_func`; TRL's transformers generation returns none and none of this applies). TRL 1.16
reads the sampler's log-probs (`sampling_per_token_logps`) in three places:

- the vLLM importance-sampling correction (`vllm_importance_sampling_correction`, on by default):
  `_generate_and_score_completions` multiplies the loss by exp(old - sampling), pi_trainer(o |
  prompt) / pi_vllm(o | prompt), to correct the numerical mismatch of the two engines. For a
  neighbor completion the trainer's log-probs are on q0 (point 3) but the sampler's are on the
  neighbor qn, so that ratio would be pi(o | q0) / pi(o | qn): a large, high-variance weight
  that would silently undo the anchoring TA-GRPO is built on. `_generate` therefore hands TRL
  NaN sampler log-probs for neighbor rows, which TRL's `nan_to_num` turns into a ratio of
  exactly 1 for every token of those rows (then clipped or masked by TRL's clip range like any
  ratio, which leaves 1 as it is unless the range excludes 1). q0 rows keep the correction.
- the `sampling/*` metrics, logged right after: `sampling_logp_difference/{mean,max}` and
  `importance_sampling_ratio/{min,mean,max}`. They measure the sampler-vs-trainer mismatch,
  which neighbor rows cannot show (their two log-probs are on different prompts), so all five
  are recomputed over q0 rows only and replace TRL's values for the batch (TRL's own would count
  the neighbor rows' constant ratio of 1 in `importance_sampling_ratio/*`). The ratio actually
  applied to the loss is 1 on neighbor rows, as said above.
- the off-policy sequence mask (`off_policy_mask_threshold`) in `_compute_loss`: it drops a
  negative-advantage completion whose mean of (sampling - current) log-probs exceeds the
  threshold, i.e. the drift of the policy since the completion was sampled. With NaN it would
  read a drift of 0 for neighbor rows and never drop one. So once TRL has computed the old-
  policy log-probs on q0's prompt ids (`old_per_token_logps`, log pi_old(o | q0)), neighbor rows
  of `sampling_per_token_logps` are set to them: the mask then sees the anchored drift log
  pi_old(o | q0) - log pi_theta(o | q0), the same quantity as in the anchored PPO ratio, while q0
  rows keep sampler drift plus engine mismatch, as in TRL. When TRL computes no old-policy
  log-probs (correction off and each generation used within one optimizer step) the policy
  cannot have moved, the neighbor rows stay NaN and TRL reads their drift as 0, which is exact.
"""

from __future__ import annotations

import inspect
import math
from typing import Any

import torch
from trl import GRPOTrainer

from tagrpo.integrations._trl_config import TAGRPOConfig
from tagrpo.integrations._trl_family import (  # noqa: F401 - re-exported for tests and users
    TAGRPOConfigError,
    check_dataset,
    check_neighbors,
    check_trl_version,
    family_reward_metrics,
    is_conversational_prompt,
    q0_sampling_metrics,
    variant_indices,
    variant_prompt,
)

# --------------------------------------------------------------------------------------------
# Trainer
# --------------------------------------------------------------------------------------------

_UNSUPPORTED_ARGS = {
    "tools": "tool calling (multi-turn rollouts)",
    "environment_factory": "environments (multi-turn rollouts)",
}


class TAGRPOTrainer(GRPOTrainer):
    """`GRPOTrainer` for TA-GRPO: same arguments, with `args` a `TAGRPOConfig` and a train
    dataset that has, besides `prompt`, a `neighbors` column (list of str, >= num_neighbors per
    row). See the module docstring for what changes and which methods are overridden."""

    def __init__(
        self,
        model,
        reward_funcs=None,
        args=None,
        train_dataset=None,
        eval_dataset=None,
        *rest,
        **kwargs,
    ):
        check_trl_version()
        bound = inspect.signature(GRPOTrainer.__init__).bind(
            self, model, reward_funcs, args, train_dataset, eval_dataset, *rest, **kwargs
        )
        if not isinstance(args, TAGRPOConfig):
            raise TAGRPOConfigError(
                f"TAGRPOTrainer needs args=TAGRPOConfig(...) (with num_neighbors and samples_per_variant), "
                f"got {type(args).__name__}."
            )
        for name, what in _UNSUPPORTED_ARGS.items():
            if bound.arguments.get(name):
                raise TAGRPOConfigError(
                    f"TAGRPOTrainer does not support {name}= ({what}): multi-turn rollouts rewrite the prompt "
                    "between turns, so the anchoring of log-probs on the original prompt is not defined. "
                    "Use GRPOTrainer for those, or single-turn prompts here."
                )
        check_dataset(train_dataset, args.num_neighbors)
        self._ta_rows: list[dict] | None = None
        super().__init__(model, reward_funcs, args, train_dataset, eval_dataset, *rest, **kwargs)

    # ---- overrides ---------------------------------------------------------------------------

    def _generate_and_score_completions(self, inputs):
        # Stashes the rows (`_generate` receives prompts alone, but needs each row's neighbors), runs
        # TRL's, then gives neighbor rows anchored sampler log-probs (module docstring, vLLM section).
        self._ta_rows = inputs
        try:
            output = super()._generate_and_score_completions(inputs)
        finally:
            self._ta_rows = None
        if self.model.training and self.args.num_neighbors > 0:
            self._ta_anchor_sampler_logps(output, len(inputs))
        return output

    def _ta_anchor_sampler_logps(self, output: dict, n_rows: int) -> None:
        """Post-process TRL's output dict when the sampler returned log-probs (vLLM, rollout_func).

        TRL has already used the NaN placeholders `_generate` put on neighbor rows: their vLLM
        importance-sampling ratio is exactly 1 (TRL's `nan_to_num` of old - sampling). From here on
        TRL reads `sampling_per_token_logps` only in the loss's off-policy mask, which must see the
        policy drift of neighbor rows too, so they get the anchored log pi_old(o | q0) that TRL has
        just computed as `old_per_token_logps` on q0's prompt ids. Before that, the `sampling/*`
        metrics TRL has just logged are recomputed over q0 rows only."""
        sampling = output.get("sampling_per_token_logps")  # (B, T) or None
        if sampling is None:
            return
        offset = self.accelerator.process_index * n_rows
        variants = variant_indices(
            n_rows, offset, self.args.num_neighbors, self.args.samples_per_variant
        )
        is_q0 = torch.tensor(variants, device=sampling.device) == 0  # (B,)
        old = output.get("old_per_token_logps")  # (B, T) or None
        if self.use_vllm and self.vllm_importance_sampling_correction:
            mask = output["completion_mask"].bool()  # (B, T); tools are refused, no tool_mask
            sequence_level = self.vllm_importance_sampling_mode.startswith("sequence")
            local = q0_sampling_metrics(
                old, sampling, output["importance_sampling_ratio"], mask, is_q0, sequence_level
            )
            self._ta_replace_sampling_metrics(local)
        # `old` is None only when TRL found no importance sampling needed: vLLM correction off and
        # each generation used within one optimizer step, so the loss-time policy is the sampling-
        # time one and the true drift is 0, which is what TRL's mask reads for a NaN row.
        if old is not None:
            sampling[~is_q0] = old[~is_q0].to(sampling.dtype)  # (B_nb, T): log pi_old(o | q0)

    def _ta_replace_sampling_metrics(self, local: dict[str, torch.Tensor]) -> None:
        """Overwrite the `sampling/*` values TRL has just appended for this batch with the q0-only
        ones, reduced across processes as TRL does, but NaN-aware (a process may hold no q0 row)."""
        metrics = self._metrics["train"]
        for name, value in local.items():
            gathered = self.accelerator.gather(value.reshape(1))  # (P,)
            ok = gathered[~torch.isnan(gathered)]  # (P_ok,)
            if ok.numel() == 0:
                reduced = math.nan
            elif name.endswith("/min"):
                reduced = ok.min().item()
            elif name.endswith("/max"):
                reduced = ok.max().item()
            else:
                reduced = ok.mean().item()
            metrics[f"sampling/{name}"][-1] = reduced  # TRL appended one value per batch

    def _generate(self, prompts: list):
        rows = self._ta_rows
        if not self.model.training or rows is None:  # evaluation: the original prompts only
            self._pending_extra_logs["ta_variant"].extend([0] * len(prompts))
            return super()._generate(prompts)
        num_neighbors, per_variant = self.args.num_neighbors, self.args.samples_per_variant
        family = (num_neighbors + 1) * per_variant
        if len(rows) != len(prompts):
            raise RuntimeError(
                f"TAGRPOTrainer: {len(prompts)} prompts but {len(rows)} rows in the batch"
            )
        offset = self.accelerator.process_index * len(prompts)
        variants = variant_indices(len(prompts), offset, num_neighbors, per_variant)
        self._ta_check_layout(prompts, offset, family)

        gen_prompts = []
        for j, (prompt, row, v) in enumerate(zip(prompts, rows, variants, strict=True)):
            if v == 0:
                gen_prompts.append(prompt)
                continue
            nbs = row.get("neighbors")
            check_neighbors(
                nbs, prompt, num_neighbors, f"train batch row {j} (prompt {str(prompt)[:80]!r})"
            )
            question = row.get("question")
            gen_prompts.append(
                variant_prompt(prompt, nbs[v - 1], question if isinstance(question, str) else None)
            )

        out = list(super()._generate(gen_prompts))
        # out = [prompt_ids, completion_ids, tool_mask, completions, logprobs, extra_fields, images, tool_images]
        prompt_ids = list(out[0])
        swap = [j for j, v in enumerate(variants) if v > 0]
        if swap:
            anchor_ids, _, _ = self._tokenize_prompts([prompts[j] for j in swap])
            for j, ids in zip(swap, anchor_ids, strict=True):
                prompt_ids[j] = list(ids)  # the q0 prompt: every log-prob TRL computes is on q0
            if out[4] is not None:  # sampler log-probs: conditioned on qn, not comparable with q0's
                # NaN placeholders until TRL has computed log pi_old(o | q0); see
                # `_ta_anchor_sampler_logps`, which replaces them.
                out[4] = [
                    [math.nan] * len(lp) if v > 0 else lp
                    for lp, v in zip(out[4], variants, strict=True)
                ]
        out[0] = prompt_ids
        self._pending_extra_logs["ta_variant"].extend(variants)
        return tuple(out)

    def _generate_single_turn(
        self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False
    ):
        # vLLM server mode samples `num_generations` completions of every `num_generations`-th prompt;
        # in training the distinct prompts are the variant blocks of G, not the families.
        if self.model.training and num_generations == self.num_generations:
            num_generations = self.args.samples_per_variant
        return super()._generate_single_turn(
            prompt_ids, images, multimodal_fields, num_generations, has_tool_images
        )

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(
            inputs, prompts, completions, completion_ids_list
        )  # (B, F)
        if self.model.training:
            weights = self.reward_weights.to(rewards_per_func.device).unsqueeze(0)  # (1, F)
            rewards = (rewards_per_func * weights).nansum(dim=1)  # (B,)
            rewards[torch.isnan(rewards_per_func).all(dim=1)] = math.nan
            metrics = family_reward_metrics(
                rewards, self.args.num_neighbors, self.args.samples_per_variant
            )
            for key, value in metrics.items():
                self._metrics["train"][key].append(value)
        return rewards_per_func

    # ---- checks ------------------------------------------------------------------------------

    @staticmethod
    def _ta_check_layout(prompts: list, offset: int, family: int) -> None:
        """Every local row of one family must carry the same prompt (TRL's sampler repeats a row
        num_generations times in a row). A custom sampler that breaks this would mix questions."""
        first: dict[int, Any] = {}
        for j, prompt in enumerate(prompts):
            fam = (offset + j) // family
            if fam not in first:
                first[fam] = prompt
            elif prompt != first[fam]:
                raise RuntimeError(
                    f"TAGRPOTrainer: batch rows of family {fam} carry different prompts; expected each dataset "
                    f"row repeated (num_neighbors + 1) * samples_per_variant = {family} times in a row (TRL's "
                    "RepeatSampler). Do not override the train sampler."
                )
