"""Surface forms of the built-in arithmetic problems: the same problem stated in other words.

TA-GRPO trains on q0 and N problem-equivalent rewordings of it (neighbors). For the built-in
generator the rewordings need no model and no validation: every form is rendered from the
problem's structure (`tagrpo.data.arith`), so the numbers, the order of the operations and the
answer are those of q0 by construction. Plain GRPO uses only the default form.

Forms are split into two disjoint sets:
- TRAIN_FORMS: the default form (q0) and NEIGHBOR_FORMS, the forms `neighbors: generator` and
  `tagrpo neighbors --backend generator` draw from;
- HELDOUT_FORMS: never used in training, for evaluating robustness to rewording
  (`tagrpo.data.arith_eval`).

Only answer-preserving changes are made: wording, tense, layout ("Given/Find", bullets, a
ledger), the question stated first, number words, other names and objects (consistently), the
second person. The operations are never reordered (add and mul do not commute).
"""

from __future__ import annotations

import random

from tagrpo.data.arith import ITEMS, MUL_VERBS, NAMES, render_default

_ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
         "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
WORDS_BELOW = 1000  # numbers below this are written as words in the number-words form, larger ones as digits


def number_words(n: int) -> str:
    """English words for 0 <= n < 1000 ("three hundred forty-two"), digits otherwise."""
    if not 0 <= n < WORDS_BELOW:
        return str(n)
    if n < 20:
        return _ONES[n]
    if n < 100:
        tens, ones = divmod(n, 10)
        return _TENS[tens] + (f"-{_ONES[ones]}" if ones else "")
    hundreds, rest = divmod(n, 100)
    return f"{_ONES[hundreds]} hundred" + (f" {number_words(rest)}" if rest else "")


def _qty(n: int, item: str, words: bool = False) -> str:
    """"5 apples", "1 apple", "five apples", "one apple"."""
    noun = item[:-1] if n == 1 and item.endswith("s") else item
    return f"{number_words(n) if words else n} {noun}"


def _times(k: int, words: bool = False) -> str:
    return "twice" if k == 2 else f"{number_words(k) if words else k} times"


def _question_first(s: dict) -> str:
    name, item = s["name"], s["item"]
    out = [f"How many {item} will {name} have at the end? {name} starts with {_qty(s['start'], item)}."]
    for j, op in enumerate(s["ops"]):
        k, when = op["k"], "First," if j == 0 else "Then"
        if op["op"] == "add":
            out.append(f"{when} {name} gets {k} more {item}.")
        elif op["op"] == "sub":
            out.append(f"{when} {name} sells {_qty(k, item)}.")
        else:
            out.append(f"{when} {name} {MUL_VERBS[k]} the number of {item}.")
    return " ".join(out)


def _number_words(s: dict) -> str:
    name, item = s["name"], s["item"]
    out = [f"{name} owns {_qty(s['start'], item, words=True)}."]
    for op in s["ops"]:
        k = op["k"]
        if op["op"] == "add":
            out.append(f"Next, {name} finds {number_words(k)} more {item}.")
        elif op["op"] == "sub":
            out.append(f"Next, {name} loses {_qty(k, item, words=True)}.")
        else:
            out.append(f"Next, {name} ends up with {_times(k, words=True)} as many {item} as before.")
    out.append(f"How many {item} does {name} own in the end?")
    return " ".join(out)


def _given_find(s: dict) -> str:
    name, item = s["name"], s["item"]
    facts = [f"{name} has {_qty(s['start'], item)}"]
    for op in s["ops"]:
        k = op["k"]
        if op["op"] == "add":
            facts.append(f"{name} then receives {k} more {item}")
        elif op["op"] == "sub":
            facts.append(f"{name} then gives away {_qty(k, item)}")
        else:
            facts.append(f"{name} then {MUL_VERBS[k]} the number of {item}")
    return f"Given: {'; '.join(facts)}.\nFind: the number of {item} {name} has at the end."


def _past_tense(s: dict) -> str:
    name, item = s["name"], s["item"]
    out = [f"In the morning, {name} had {_qty(s['start'], item)}."]
    for j, op in enumerate(s["ops"]):
        k, when = op["k"], "Later that day" if j == 0 else "After that"
        if op["op"] == "add":
            out.append(f"{when}, {name} bought {k} more {item}.")
        elif op["op"] == "sub":
            out.append(f"{when}, {name} {['gave away', 'lost'][op.get('v', 0)]} {_qty(k, item)}.")
        else:
            out.append(f"{when}, {name} {MUL_VERBS[k][:-1]}d the number of {item}.")
    out.append(f"How many {item} did {name} have at the end of the day?")
    return " ".join(out)


def _bullets(s: dict) -> str:
    name, item = s["name"], s["item"]
    lines = [f"{name} starts with {_qty(s['start'], item)}. Then, in this order:"]
    for op in s["ops"]:
        k = op["k"]
        if op["op"] == "add":
            lines.append(f"- {name} is given {k} more {item}")
        elif op["op"] == "sub":
            lines.append(f"- {name} gives away {_qty(k, item)}")
        else:
            lines.append(f"- {name} ends up with {_times(k)} as many {item} as before")
    lines.append(f"How many {item} does {name} have after all of this?")
    return "\n".join(lines)


def _second_person(s: dict) -> str:
    item = s["item"]
    out = [f"You have {_qty(s['start'], item)}."]
    for op in s["ops"]:
        k, v = op["k"], op.get("v", 0)
        if op["op"] == "add":
            out.append([f"You buy {k} more {item}.", f"A friend gives you {k} more {item}."][v])
        elif op["op"] == "sub":
            out.append([f"You give away {_qty(k, item)}.", f"You lose {_qty(k, item)}."][v])
        else:
            out.append(f"You {MUL_VERBS[k][:-1]} the number of {item} you have.")
    out.append(f"How many {item} do you have now?")
    return " ".join(out)


def _ledger(s: dict) -> str:
    name, item = s["name"], s["item"]
    lines = [f"A log of {name}'s {item}:", f"1. Start: {_qty(s['start'], item)}."]
    for j, op in enumerate(s["ops"], start=2):
        k = op["k"]
        if op["op"] == "add":
            lines.append(f"{j}. Received: {k} more {item}.")
        elif op["op"] == "sub":
            lines.append(f"{j}. Gave away: {_qty(k, item)}.")
        else:
            lines.append(f"{j}. {MUL_VERBS[k][:-1].capitalize()}d the number of {item}.")
    lines.append(f"How many {item} does {name} have at the end of the log?")
    return "\n".join(lines)


def renamed(structure: dict, rng: random.Random) -> dict:
    """The structure with another name and another object, chosen by rng (used consistently)."""
    name = rng.choice([x for x in NAMES if x != structure["name"]])
    item = rng.choice([x for x in ITEMS if x != structure["item"]])
    return {**structure, "name": name, "item": item}


def _renamed(s: dict, seed: int = 0) -> str:
    return render_default(renamed(s, random.Random(f"rename-{seed}-{s['name']}-{s['item']}")))


RENDERERS = {
    "default": render_default,
    "renamed": _renamed,
    "question_first": _question_first,
    "number_words": _number_words,
    "given_find": _given_find,
    "past_tense": _past_tense,
    "bullets": _bullets,
    "second_person": _second_person,
    "ledger": _ledger,
}
NEIGHBOR_FORMS = ("renamed", "question_first", "number_words", "given_find", "past_tense")
TRAIN_FORMS = ("default", *NEIGHBOR_FORMS)
HELDOUT_FORMS = ("bullets", "second_person", "ledger")
FORMS = TRAIN_FORMS + HELDOUT_FORMS


def render(structure: dict, form: str = "default", seed: int = 0) -> str:
    """The problem in one surface form. `seed` only matters for 'renamed' (which other name and
    object); every other form is a pure function of the structure."""
    if form not in RENDERERS:
        raise ValueError(f"unknown arithmetic form {form!r}; choose one of {', '.join(FORMS)}")
    if form == "renamed":
        return _renamed(structure, seed)
    return RENDERERS[form](structure)


def pick_forms(n: int, row_id, seed: int = 0, exclude: tuple[str, ...] = ("default",)) -> list[tuple[str, int]]:
    """N distinct neighbor forms for one row, with each one's rendering seed: deterministic per
    (row id, seed), and the same in every process (string seeding is not salted)."""
    forms = [f for f in NEIGHBOR_FORMS if f not in exclude]
    if not 0 <= n <= len(forms):
        raise ValueError(f"the generator has {len(forms)} neighbor forms ({', '.join(forms)}); cannot make {n} distinct neighbors")
    rng = random.Random(f"generator-neighbors-{seed}-{row_id}")
    return [(f, rng.randrange(2**31)) for f in rng.sample(forms, n)]


def generator_neighbors(structure: dict, n: int, row_id, seed: int = 0, exclude: tuple[str, ...] = ("default",)) -> list[str]:
    """N neighbors of a generated problem: N distinct training forms (never the default form,
    which is q0's, nor a held-out form), exactly answer-preserving."""
    return [render(structure, form, s) for form, s in pick_forms(n, row_id, seed, exclude)]


def row_neighbors(row: dict, n: int, seed: int = 0, exclude: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """(form, text) of N generator neighbors of a data row: the row must carry the generator's
    `structure` (rows of `generate_problems`, or files written from them) whose answer is the
    row's answer; ValueError saying what is missing otherwise. The row's own form (`form`,
    default 'default') and the forms in `exclude` are never drawn."""
    from tagrpo.data.arith import check_structure, evaluate

    if row.get("structure") is None:
        raise ValueError("no `structure` field: the generator backend only rewrites problems of the built-in "
                         "arithmetic generator (train_data: arith, or rows written from tagrpo.data.arith.generate_problems)")
    structure = check_structure(row["structure"])
    answer = str(row.get("answer", "")).strip()
    if answer != str(evaluate(structure)):
        raise ValueError(f"the structure evaluates to {evaluate(structure)} but the row's answer is {answer!r}")
    exclude = ("default", str(row.get("form") or "default"), *exclude)
    return [(form, render(structure, form, s)) for form, s in pick_forms(n, row.get("id"), seed, exclude)]
