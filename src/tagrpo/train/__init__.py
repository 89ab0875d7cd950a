"""Training: config, rollouts, the GRPO / TA-GRPO trainer loop, checkpoints, logging."""
