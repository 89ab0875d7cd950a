"""Prompt templates for LLM neighbors: versions change with the text (new cache keys), the
problem is delimited, and replies are cleaned of the usual wrapping."""

from __future__ import annotations

import dataclasses

import pytest

from tagrpo.neighbors.prompts import FORMAT, PARAPHRASE, RENAME, SOLVE, TEMPLATES, clean_response

Q = "Tom has 3 apples. How many apples does he have?"


def test_versions_are_distinct_and_follow_the_text():
    versions = {t.version for t in (PARAPHRASE, RENAME, FORMAT, SOLVE)}
    assert len(versions) == 4
    assert PARAPHRASE.version.startswith("paraphrase-v1-")
    edited = dataclasses.replace(PARAPHRASE, user=PARAPHRASE.user + " Be brief.")
    assert edited.version != PARAPHRASE.version  # an edit is a new cache key even without a bump
    bumped = dataclasses.replace(PARAPHRASE, revision=2)
    assert bumped.version.startswith("paraphrase-v2-")
    assert set(TEMPLATES) == {"paraphrase", "rename", "format"}


def test_messages_delimit_the_problem():
    for t in (PARAPHRASE, RENAME, FORMAT, SOLVE):
        msgs = t.messages("  " + Q + "\n")
        assert [m["role"] for m in msgs] == ["system", "user"]
        assert f"<problem>\n{Q}\n</problem>" in msgs[1]["content"]
    assert "\\boxed{}" in SOLVE.messages(Q)[1]["content"]


@pytest.mark.parametrize(
    "reply",
    [
        Q,
        f"  {Q}\n",
        f"```\n{Q}\n```",
        f"Rewritten problem: {Q}",
        f"Sure! Here is the paraphrased problem:\n\n{Q}",
        f"Here's a reworded version:\n{Q}\n\nLet me know if you need anything else!",
        f"<problem>\n{Q}\n</problem>",
        f'"{Q}"',
    ],
)
def test_clean_response(reply):
    assert clean_response(reply) == Q


def test_clean_response_keeps_problem_lines_ending_in_colon():
    text = "Given:\n- Tom has 3 apples.\nFind: How many apples does he have?"
    assert clean_response(text) == text
    assert clean_response(None) == "" and clean_response("   ") == ""
