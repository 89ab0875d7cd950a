"""Verifiable rewards: answer extraction and mathematical equivalence (math-verify), bounded in
time so that one hostile completion cannot stall a training step."""

from tagrpo.rewards.extract import extract_boxed, extract_final_answer, normalize_gold
from tagrpo.rewards.math import MathVerifier, math_reward

__all__ = ["MathVerifier", "extract_boxed", "extract_final_answer", "math_reward", "normalize_gold"]
