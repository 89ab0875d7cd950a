#!/usr/bin/env bash
# TA-GRPO, the paper's Qwen3-1.7B MATH setting, on verl 0.9.1: one node, 4 GPUs, vLLM rollouts.
#   G=8 per variant, N=3 neighbors -> rollout.n = (3+1)*8 = 32 responses per question (one uid)
#   lr 1e-6, cosine schedule, 10% warm-up; KL loss low_var_kl (k3) 0.001; clip 0.2; token-mean
#   prompt 512 / response 3072 tokens; 256 questions per step; rollout temperature 1.0
# Data: bash examples/verl/prepare_data.sh MATH_train.jsonl data/math_ta
# Extra Hydra overrides are passed through ("$@"), e.g. tagrpo.algorithm=grpo-matched for the
# matched-budget baseline, or --cfg job --resolve to print the composed config and exit.
# NOT RUN in this repository (no GPU here); the composed config is checked by the CPU tests.
set -euo pipefail
DATA=${DATA:-data/math_ta}
MODEL=${MODEL:-Qwen/Qwen3-1.7B}
PYTHON=${PYTHON:-python}

"$PYTHON" -m tagrpo.integrations.verl \
  tagrpo.algorithm=ta-grpo \
  tagrpo.num_neighbors=3 \
  tagrpo.samples_per_variant=8 \
  data.train_files="$DATA/train.parquet" \
  data.val_files="$DATA/train.parquet" \
  data.train_batch_size=256 \
  data.max_prompt_length=512 \
  data.max_response_length=3072 \
  data.filter_overlong_prompts=true \
  data.truncation=error \
  actor_rollout_ref.model.path="$MODEL" \
  actor_rollout_ref.model.enable_gradient_checkpointing=true \
  actor_rollout_ref.actor.optim.lr=1e-6 \
  actor_rollout_ref.actor.optim.lr_scheduler_type=cosine \
  actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0.1 \
  actor_rollout_ref.actor.ppo_mini_batch_size=64 \
  actor_rollout_ref.actor.use_dynamic_bsz=true \
  actor_rollout_ref.actor.ppo_max_token_len_per_gpu=16384 \
  actor_rollout_ref.actor.use_kl_loss=true \
  actor_rollout_ref.actor.kl_loss_coef=0.001 \
  actor_rollout_ref.actor.kl_loss_type=low_var_kl \
  actor_rollout_ref.actor.clip_ratio_low=0.2 \
  actor_rollout_ref.actor.clip_ratio_high=0.2 \
  actor_rollout_ref.actor.loss_agg_mode=token-mean \
  actor_rollout_ref.rollout.name=vllm \
  actor_rollout_ref.rollout.temperature=1.0 \
  actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
  actor_rollout_ref.rollout.gpu_memory_utilization=0.6 \
  actor_rollout_ref.rollout.val_kwargs.n=1 \
  algorithm.use_kl_in_reward=false \
  trainer.n_gpus_per_node=4 \
  trainer.nnodes=1 \
  trainer.total_epochs=1 \
  trainer.val_before_train=false \
  trainer.test_freq=-1 \
  trainer.save_freq=50 \
  trainer.logger='["console"]' \
  trainer.project_name=tagrpo \
  trainer.experiment_name=qwen3-1.7b-math-ta-grpo \
  "$@"
