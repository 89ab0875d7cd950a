"""Neighbors: problem-equivalent rewordings of training questions (step 1 of TA-GRPO)."""
