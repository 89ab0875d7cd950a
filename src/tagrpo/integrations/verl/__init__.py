"""TA-GRPO for verl users: stock verl (Ray, FSDP/Megatron, vLLM/SGLang rollouts, the `grpo`
estimator, the PPO loss, checkpoints) with a few lines of its launch changed.

    python -m tagrpo.integrations.verl data.train_files=train.parquet \\
        actor_rollout_ref.model.path=Qwen/Qwen3-1.7B tagrpo.num_neighbors=3 tagrpo.samples_per_variant=8

What differs from a plain verl GRPO run (checked against verl 0.9.1, see `SUPPORTED_VERL`):

1. Data: one dataset row per *family*. `prompt` holds q0's messages as usual; `extra_info`
   holds `question` (q0's text inside the prompt) and `neighbors` (q1..qN). `tagrpo export verl`
   writes this layout from `tagrpo neighbors` output (`tagrpo.integrations.verl.data`).
2. `actor_rollout_ref.rollout.n = (N+1)*G`: all (N+1)*G responses of a family share the row's
   `uid`, so verl's own `grpo` estimator normalizes over the whole family (the joint advantage).
   The estimator is not replaced.
3. An agent loop (`tagrpo.integrations.verl.agent_loop.TAGRPOAgentLoop`, a `SingleTurnAgentLoop`)
   generates session s from q_{s // G} and then reports **q0's** prompt token ids as the prompt.
   verl builds input_ids / attention_mask / position_ids (and v1's length tags) from what the
   loop reports, so old-policy, reference and current log-probs are all log pi(o | q0): the
   anchoring. verl's legacy (v0) trainer does not pass a session id to agent loops; the manager
   `TAGRPOAgentLoopManager` numbers the copies of each uid for it.
4. Rollout log-probs are off (`rollout.calculate_log_probs=false`) and rollout correction
   (bypass mode, importance sampling, rejection sampling) is refused for `ta-grpo`: the sampler's
   log-probs of a neighbor row are conditioned on q_n, so they would weight the row by
   pi(o|q0)/pi(o|q_n) and undo the anchoring.
5. A reward function for verl that calls `tagrpo.rewards.math_reward`
   (`tagrpo.integrations.verl.reward.compute_score`).
6. The uniform-group diagnostics (`uniform/q0_*`, `uniform/family_*`) in verl's step metrics:
   the entry point runs verl's `run_ppo` with tagrpo's task runner, whose trainer (v1 or legacy
   v0) adds them (`tagrpo.integrations.verl.trainer`).

Switches (`tagrpo.algorithm=`): `ta-grpo` (the method), `grpo` (n = G, no neighbors),
`grpo-matched` ((N+1)*G samples of q0), `ta-grpo-unanchored` (joint advantage, q_n reported as
the prompt, as the authors' public code does), `ta-grpo-separate` (sampled and anchored like
`ta-grpo`, rollout.n = (N+1)*G under one uid, but each variant's G rewards normalized alone). verl
keys every trajectory by the prompt's uid, so the separate ablation keeps the uid and changes only
the grouping index of verl's own `grpo` advantage to (uid, `ta_variant`), through the same task
runner's trainer (`tagrpo.integrations.verl.advantage`); its agent loop refuses to run under a
trainer built any other way (verl's own `main_ppo`), which would normalize over the family.

Nothing here imports verl at import time: `import tagrpo.integrations.verl` works without verl;
the submodules that need it raise an ImportError that says how to install it.
"""

from __future__ import annotations

#: verl versions this integration is tested with (the `verl` extra in pyproject.toml pins the same).
SUPPORTED_VERL = "==0.9.1"

__all__ = ["SUPPORTED_VERL"]
