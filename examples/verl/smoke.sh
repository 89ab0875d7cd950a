#!/usr/bin/env bash
# A small TA-GRPO smoke run on verl 0.9.1: one GPU, a 0.5B instruct model, N=1, G=2 (n=4),
# 8 questions per step, 256-token responses, 5 steps. Checks that the pipeline runs, not learning.
# Data: bash examples/verl/prepare_data.sh ../shared/data/gsm8k_dev.jsonl data/smoke
#       (it writes 3 neighbors per row; with tagrpo.num_neighbors=1 the first one is used)
# NOT RUN in this repository (no GPU here); the composed config is checked by the CPU tests.
set -euo pipefail
DATA=${DATA:-data/smoke}
MODEL=${MODEL:-Qwen/Qwen2.5-0.5B-Instruct}
PYTHON=${PYTHON:-python}

"$PYTHON" -m tagrpo.integrations.verl \
  tagrpo.num_neighbors=1 \
  tagrpo.samples_per_variant=2 \
  data.train_files="$DATA/train.parquet" \
  data.val_files="$DATA/train.parquet" \
  data.train_batch_size=8 \
  data.max_prompt_length=512 \
  data.max_response_length=256 \
  actor_rollout_ref.model.path="$MODEL" \
  actor_rollout_ref.actor.optim.lr=1e-6 \
  actor_rollout_ref.actor.ppo_mini_batch_size=8 \
  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4 \
  actor_rollout_ref.actor.use_kl_loss=true \
  actor_rollout_ref.actor.kl_loss_coef=0.001 \
  actor_rollout_ref.actor.kl_loss_type=low_var_kl \
  actor_rollout_ref.rollout.name=vllm \
  actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
  actor_rollout_ref.rollout.gpu_memory_utilization=0.4 \
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4 \
  actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4 \
  trainer.n_gpus_per_node=1 \
  trainer.nnodes=1 \
  trainer.total_training_steps=5 \
  trainer.val_before_train=false \
  trainer.test_freq=-1 \
  trainer.save_freq=-1 \
  trainer.logger='["console"]' \
  trainer.project_name=tagrpo \
  trainer.experiment_name=smoke \
  "$@"
