"""Neighbors: problem-equivalent rewordings of training questions (step 1 of TA-GRPO).

Plain GRPO samples G responses for each question; TA-GRPO also samples them for N rewordings
(neighbors) of it and pools all the rewards into one advantage. This package makes those
neighbors: offline rules, an OpenAI-compatible LLM backend, a local transformers backend, a
validator that rejects anything that is not the same problem, and a resumable SQLite store.
"""

from tagrpo.neighbors.backends import BackendFatal, Job, Reply, RuleBackend
from tagrpo.neighbors.builder import BuildOptions, BuildReport, NeighborBuilder, build_neighbors
from tagrpo.neighbors.rules import TRANSFORMATIONS as RULE_TRANSFORMATIONS
from tagrpo.neighbors.rules import transform as rule_transform
from tagrpo.neighbors.store import CandidateKey, NeighborStore, question_hash
from tagrpo.neighbors.validate import REASONS, ValidationConfig, Verdict, validate_neighbor

__all__ = [
    "REASONS",
    "RULE_TRANSFORMATIONS",
    "BackendFatal",
    "BuildOptions",
    "BuildReport",
    "CandidateKey",
    "Job",
    "NeighborBuilder",
    "NeighborStore",
    "Reply",
    "RuleBackend",
    "ValidationConfig",
    "Verdict",
    "build_neighbors",
    "question_hash",
    "rule_transform",
    "validate_neighbor",
]
