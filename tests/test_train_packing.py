"""Micro-batch packing for the update (tagrpo.train.packing)."""

from __future__ import annotations

import random

from tagrpo.train.packing import computed_tokens, pack_micro_batches, pack_shared_prefix


def _flat(batches):
    return sorted(i for b in batches for i in b)


def test_pack_micro_batches_covers_every_row_once_within_budget():
    rng = random.Random(0)
    lengths = [(rng.randint(5, 40), rng.randint(1, 64)) for _ in range(50)]
    budget = 300
    batches = pack_micro_batches(lengths, budget)
    assert _flat(batches) == list(range(50))
    for b in batches:
        cost = len(b) * (max(lengths[i][0] for i in b) + max(lengths[i][1] for i in b))
        assert cost <= budget or len(b) == 1  # a row longer than the budget runs alone


def test_pack_micro_batches_row_over_budget_gets_its_own():
    batches = pack_micro_batches([(10, 10), (400, 100), (10, 12)], 100)
    assert [1] in batches and _flat(batches) == [0, 1, 2]


def test_pack_shared_prefix_keeps_a_prompts_rows_together_and_within_budget():
    prompts = [[1, 2, 3]] * 6 + [[4, 5]] * 6  # two anchors, six responses each
    responses = [[7] * n for n in (3, 9, 1, 5, 2, 8, 4, 6, 2, 7, 3, 1)]
    budget = 40
    batches = pack_shared_prefix(prompts, responses, list(range(12)), budget)
    assert _flat(batches) == list(range(12))
    for b in batches:
        uniq = {tuple(prompts[i]) for i in b}
        cost = len(uniq) * max(len(p) for p in uniq) + len(b) * max(len(responses[i]) for i in b)
        assert cost <= budget or len(b) == 1
    # rows of one prompt are contiguous in the order the batches give them
    order = [i for b in batches for i in b]
    assert {tuple(prompts[i]) for i in order[:6]} == {(1, 2, 3)}


def test_computed_tokens_counts_padding_and_shared_prompts():
    prompts = [[1, 2, 3], [1, 2, 3], [4]]
    responses = [[9, 9], [9], [9, 9, 9, 9]]
    assert computed_tokens(prompts, responses, shared_prefix=False) == 3 * (3 + 4)
    assert computed_tokens(prompts, responses, shared_prefix=True) == 2 * 3 + 3 * 4
    assert computed_tokens(prompts, responses, shared_prefix=True, per_row=2) == 2 * (3 + 2 * 4)
    assert computed_tokens(prompts, responses, shared_prefix=True, per_row=1) == 3 * (3 + 4)
