"""The arithmetic generator's structures and surface forms: the default form is byte-identical to
the text-only generator's, and every other form states exactly the same problem.

Answer equivalence is checked by an independent parser written here (not the renderers' code):
it reads the start count and the operations back from each rendering, in order, and the
recomputed count must equal the row's answer, for thousands of random problems in every form.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from pathlib import Path

import pytest

from tagrpo.data.arith import (
    ITEMS,
    NAMES,
    check_structure,
    evaluate,
    generate_problems,
    make_structure,
)
from tagrpo.data.arith_eval import EVAL_SETS, eval_set, eval_sets, main, math_key
from tagrpo.data.arith_forms import (
    FORMS,
    HELDOUT_FORMS,
    NEIGHBOR_FORMS,
    RENDERERS,
    TRAIN_FORMS,
    generator_neighbors,
    number_words,
    pick_forms,
    render,
    row_neighbors,
)

FIXTURE = Path(__file__).parent / "fixtures" / "arith_default_v1.json"

# --- an independent reader of the renderings ------------------------------------------------
_ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
         "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90}
_VALUE = {w: i for i, w in enumerate(_ONES)} | _TENS
_UNDER_100 = rf"(?:(?:{'|'.join(_TENS)})(?:-(?:{'|'.join(_ONES[1:10])}))?|{'|'.join(reversed(_ONES))})"
_WORD_NUMBER = re.compile(rf"\b(?:(?:{'|'.join(_ONES[1:10])}) hundred(?: {_UNDER_100})?|{_UNDER_100})\b")


def _word_value(phrase: str) -> int:
    total = 0
    for part in phrase.split():
        if part == "hundred":
            total *= 100
        else:
            total += sum(_VALUE[p] for p in part.split("-"))
    return total


def words_to_digits(text: str) -> str:
    return _WORD_NUMBER.sub(lambda m: str(_word_value(m.group(0))), text)


_EVENTS = [
    (re.compile(r"\b(\d+) more\b"), "add", None),
    (re.compile(r"\b(?:gives? away|gave away|loses|lose|lost|sells?|sold):?\s+(\d+)\b"), "sub", None),
    (re.compile(r"\b(\d+) times as many\b"), "mul", None),
    (re.compile(r"\b(?:doubles?|doubled|twice as many)\b"), "mul", 2),
    (re.compile(r"\b(?:triples?|tripled)\b"), "mul", 3),
    (re.compile(r"\b(?:quadruples?|quadrupled)\b"), "mul", 4),
]


def parse(text: str) -> tuple[int, list[tuple[str, int]]]:
    """(start, [(op, k), ...]) read back from a rendering, in the order the text states them."""
    t = words_to_digits(text.lower())
    t = re.sub(r"^\d+\.\s", "", t, flags=re.MULTILINE)  # the ledger's line numbers
    events, used = [], set()
    for rx, op, k in _EVENTS:
        for m in rx.finditer(t):
            if m.groups():
                events.append((m.start(), op, int(m.group(1))))
                used.add(m.start(1))
            else:
                events.append((m.start(), op, k))
    numbers = [(m.start(), int(m.group(0))) for m in re.finditer(r"\b\d+\b", t) if m.start() not in used]
    assert len(numbers) == 1, f"expected exactly one start count besides the operations: {numbers} in {text!r}"
    events.sort()
    assert all(numbers[0][0] < pos for pos, _, _ in events), f"the start count must come before the operations: {text!r}"
    return numbers[0][1], [(op, k) for _, op, k in events]


def recompute(start: int, ops: list[tuple[str, int]]) -> int:
    for op, k in ops:
        start = {"add": start + k, "sub": start - k, "mul": start * k}[op]
    return start


def mentioned(text: str, pool: list[str], singular: bool = False) -> set[str]:
    found = set()
    for word in pool:
        forms = [word, word[:-1]] if singular else [word]
        if any(re.search(rf"\b{re.escape(f)}\b", text) for f in forms):
            found.add(word)
    return found


def many_structures():
    for d in range(1, 6):
        for seed in range(8):
            yield from generate_problems(25, d, seed=seed)
    for ops in (1, 3, 6, 8):
        yield from generate_problems(25, 2, seed=99, num_ops=ops)


# --- the default form is the old generator's text ---------------------------------------------
def test_default_form_is_byte_identical_to_the_text_only_generator():
    fx = json.loads(FIXTURE.read_text())
    for key, rows in fx["rows"].items():
        d, s = (int(x[1:]) for x in key.split("-"))
        got = [{k: r[k] for k in ("id", "question", "answer")} for r in generate_problems(6, d, seed=s)]
        assert got == rows, key
    for key, digest in fx["sha256_n300"].items():
        d, s = (int(x[1:]) for x in key.split("-"))
        rows = generate_problems(300, d, seed=s)
        got = [{k: r[k] for k in ("id", "question", "answer")} for r in rows]
        assert hashlib.sha256(json.dumps(got, sort_keys=True).encode()).hexdigest() == digest, key
        assert all(render(r["structure"]) == r["question"] for r in rows)


def test_structures_are_json_rows_and_evaluate_to_the_answer():
    for r in many_structures():
        s = r["structure"]
        assert json.loads(json.dumps(s)) == s and check_structure(s) is s
        assert str(evaluate(s)) == r["answer"] and evaluate(s) > 0


# --- every form is the same problem -----------------------------------------------------------
def test_forms_are_split_into_disjoint_training_and_heldout_sets():
    assert set(TRAIN_FORMS).isdisjoint(HELDOUT_FORMS)
    assert set(FORMS) == set(RENDERERS) == set(TRAIN_FORMS) | set(HELDOUT_FORMS)
    assert TRAIN_FORMS[0] == "default" and set(NEIGHBOR_FORMS) == set(TRAIN_FORMS) - {"default"}
    assert len(NEIGHBOR_FORMS) >= 3 and len(HELDOUT_FORMS) >= 3


@pytest.mark.parametrize("form", FORMS)
def test_every_form_states_the_same_operations_and_answer(form):
    n = 0
    for r in many_structures():
        s = r["structure"]
        text = render(s, form, seed=n)
        start, ops = parse(text)
        assert (start, ops) == (s["start"], [(o["op"], o["k"]) for o in s["ops"]]), (form, text, s)
        assert str(recompute(start, ops)) == r["answer"], (form, text)
        assert "?" in text or "Find:" in text, text
        names, items = mentioned(text, NAMES), mentioned(text, ITEMS, singular=True)
        if form == "renamed":
            assert len(names) == 1 and len(items) == 1 and names != {s["name"]} and items != {s["item"]}, text
        elif form == "second_person":
            assert names == set() and items == {s["item"]}, text
        else:
            assert names == {s["name"]} and items == {s["item"]}, text
        n += 1
    assert n > 1000


def test_renderings_differ_from_the_default_and_from_each_other():
    for r in generate_problems(200, 3, seed=5):
        texts = [render(r["structure"], f, seed=1) for f in FORMS]
        assert len(set(texts)) == len(FORMS)


def test_number_words_read_back_exactly():
    for n in range(1000):
        assert words_to_digits(number_words(n)) == str(n)
    assert number_words(42) == "forty-two" and number_words(305) == "three hundred five"
    assert number_words(1000) == "1000"


def test_question_first_states_the_question_before_the_facts():
    for r in generate_problems(50, 2, seed=3):
        text = render(r["structure"], "question_first")
        assert text.index("?") < text.index(str(r["structure"]["start"]))


def test_unknown_form_names_the_choices():
    with pytest.raises(ValueError, match="choose one of default, renamed"):
        render(generate_problems(1)[0]["structure"], "haiku")


@pytest.mark.parametrize("bad,match", [
    ({"name": "A", "item": "apples", "start": 3, "ops": [{"op": "sub", "k": 3}]}, "out of range"),
    ({"name": "A", "item": "apples", "start": 3, "ops": [{"op": "mul", "k": 7}]}, "out of range"),
    ({"name": "A", "item": "apples", "start": 3, "ops": [{"op": "div", "k": 2}]}, "operation 1"),
    ({"name": "A", "item": "apples", "ops": []}, "'start'"),
    ("[1, 2", "not JSON"),
])
def test_malformed_structures_are_refused(bad, match):
    with pytest.raises(ValueError, match=match):
        check_structure(bad)


# --- neighbors --------------------------------------------------------------------------------
def test_generator_neighbors_are_distinct_training_forms_and_deterministic():
    rows = generate_problems(100, 2, seed=1)
    seen_forms = set()
    for r in rows:
        picked = pick_forms(3, r["id"], seed=0)
        forms = [f for f, _ in picked]
        assert len(set(forms)) == 3 and set(forms) <= set(NEIGHBOR_FORMS)
        seen_forms |= set(forms)
        nb = generator_neighbors(r["structure"], 3, r["id"], seed=0)
        assert nb == generator_neighbors(r["structure"], 3, r["id"], seed=0)
        assert len(set(nb)) == 3 and r["question"] not in nb
        assert [(f, t) for f, t in zip(forms, nb)] == row_neighbors(r, 3, seed=0)
        for text in nb:
            assert str(recompute(*parse(text))) == r["answer"]
    assert seen_forms == set(NEIGHBOR_FORMS)
    other_seed = [generator_neighbors(r["structure"], 3, r["id"], seed=1) for r in rows]
    assert other_seed != [generator_neighbors(r["structure"], 3, r["id"], seed=0) for r in rows]


def test_neighbors_never_use_a_heldout_form():
    s = make_structure(random.Random(0), 2)
    heldout = {render(s, f) for f in HELDOUT_FORMS}
    for row_id in range(200):
        for n in range(len(NEIGHBOR_FORMS) + 1):
            assert heldout.isdisjoint(generator_neighbors(s, n, row_id, seed=row_id % 3))


def test_too_many_neighbors_and_rows_without_structure_are_clear_errors():
    r = generate_problems(1)[0]
    with pytest.raises(ValueError, match=f"{len(NEIGHBOR_FORMS)} neighbor forms"):
        generator_neighbors(r["structure"], len(NEIGHBOR_FORMS) + 1, r["id"])
    with pytest.raises(ValueError, match="no `structure` field"):
        row_neighbors({"id": 1, "question": "What is 2+2?", "answer": "4"}, 2)
    with pytest.raises(ValueError, match="evaluates to"):
        row_neighbors({**r, "answer": str(int(r["answer"]) + 1)}, 2)
    # a row stated in a neighbor form never gets that form back
    assert all(f != "given_find" for f, _ in row_neighbors({**r, "form": "given_find"}, 4, seed=3))


# --- evaluation sets --------------------------------------------------------------------------
def test_eval_sets_are_new_problems_in_training_heldout_and_harder_forms():
    train = generate_problems(64, 1, seed=0)
    sets = eval_sets(48, difficulty=1, seed=10_007, avoid=train)
    assert set(sets) == set(EVAL_SETS) and all(len(v) == 48 for v in sets.values())
    train_keys = {math_key(r["structure"]) for r in train}
    for kind, rows in sets.items():
        assert all(math_key(r["structure"]) not in train_keys for r in rows), kind
        for r in rows:
            assert str(recompute(*parse(r["question"]))) == r["answer"], (kind, r["question"])
    a, b, c = sets["train-form"], sets["heldout-form"], sets["harder"]
    assert all(r["form"] == "default" and r["question"] == render(r["structure"]) for r in a)
    assert [r["structure"] for r in a] == [r["structure"] for r in b]  # paired row by row
    assert {r["form"] for r in b} == set(HELDOUT_FORMS)
    assert all(r["question"] == render(r["structure"], r["form"]) for r in b)
    assert all(len(r["structure"]["ops"]) == 2 and r["form"] == "default" for r in c)
    assert eval_set("harder", 48, 1, 10_007, extra_ops=1, avoid=train) == c
    with pytest.raises(ValueError, match="choose one of train-form, heldout-form, harder"):
        eval_set("easy", 4)


def test_eval_sets_command_writes_loadable_files(tmp_path, capsys):
    from tagrpo.data.io import read_rows, write_rows

    write_rows(tmp_path / "train.jsonl", generate_problems(16, 1, seed=0))
    main(["--out", str(tmp_path / "eval"), "--n", "6", "--avoid", str(tmp_path / "train.jsonl")])
    for kind in EVAL_SETS:
        rows = read_rows(tmp_path / "eval" / f"arith-{kind}.jsonl")
        assert len(rows) == 6 and all(check_structure(r["structure"]) for r in rows)
    assert "heldout-form:" in capsys.readouterr().out
