"""tagrpo: Transformation-Augmented GRPO (TA-GRPO) for RL from verifiable rewards.

Plain GRPO normalizes rewards per prompt, so a prompt whose G answers all score the same
teaches nothing. TA-GRPO samples G answers for the original question q0 *and* for N
problem-equivalent rewordings, normalizes advantages over the whole family of (N+1)*G
answers, and computes every log-probability on q0. See DESIGN.md for the contracts.

Nothing heavy is imported here: `import tagrpo` is cheap; submodules load torch/transformers.
"""

__version__ = "0.1.0"
