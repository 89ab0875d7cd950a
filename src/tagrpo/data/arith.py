"""Built-in arithmetic word problems with a difficulty knob, for the CPU demo and benchmarks.

Difficulty d (1..5) sets the number of operations (d) and the size of the numbers, so a 135M
model can be placed in the regime where it is right only sometimes: the regime where GRPO's
per-question signal vanishes and TA-GRPO's neighbors help. Deterministic given the seed.

Every problem is generated as a structure first and rendered second:

    structure = {"name": "Tom", "item": "apples", "start": 5,
                 "ops": [{"op": "add", "k": 9, "v": 0}, {"op": "mul", "k": 3, "v": 0}, ...]}

ops apply in order to the running count: add k, sub k (k < count, so it stays positive) or mul k
(k in 2..4); `v` picks between the two wordings of the default form. `evaluate(structure)` is
the answer. The row's `question` is the default form (`render_default`), byte-identical to the
text this generator wrote before structures existed; the row keeps the structure (`structure`,
JSON-serializable) so that `tagrpo.data.arith_forms` can state the same problem in other surface
forms: TA-GRPO's `neighbors: generator`, exactly answer-preserving by construction.
"""

from __future__ import annotations

import random

NAMES = ["Tom", "Anna", "Liam", "Mia", "Noah", "Emma", "Omar", "Sara", "Ravi", "Lena", "Ivan", "Yuki", "Paul", "Nora"]
ITEMS = ["apples", "marbles", "stickers", "books", "pencils", "cookies", "stamps", "coins", "cards", "shells"]
OPS = ("add", "sub", "mul")
MAX_N = {1: 9, 2: 12, 3: 20, 4: 30, 5: 50}
MUL_VERBS = {2: "doubles", 3: "triples", 4: "quadruples"}


def _step(rng: random.Random, total: int, max_n: int) -> dict:
    """One operation applied to the running total. The random draws are those of the text-only
    generator, in the same order, so the same seed gives the same problems."""
    ops = ["add", "sub", "mul"] if total <= max_n * 2 else ["add", "sub"]
    op = rng.choice(ops)
    if op == "add":
        k = rng.randint(2, max_n)
        return {"op": "add", "k": k, "v": rng.choice((0, 1))}
    if op == "sub" and total > 2:
        k = rng.randint(1, total - 1)
        return {"op": "sub", "k": k, "v": rng.choice((0, 1))}
    return {"op": "mul", "k": rng.randint(2, 4), "v": 0}


def apply_op(total: int, op: dict) -> int:
    if op["op"] == "add":
        return total + op["k"]
    if op["op"] == "sub":
        return total - op["k"]
    return total * op["k"]


def evaluate(structure: dict) -> int:
    """The answer: the count after every operation, in order."""
    total = structure["start"]
    for op in structure["ops"]:
        total = apply_op(total, op)
    return total


def check_structure(structure) -> dict:
    """The structure if it is well formed, else ValueError saying what is wrong (rows read from
    files carry it as a dict, or as a JSON string)."""
    if isinstance(structure, str):
        import json

        try:
            structure = json.loads(structure)
        except ValueError:
            raise ValueError("the structure is a string but not JSON") from None
    if not isinstance(structure, dict):
        raise ValueError(f"the structure must be a mapping, got {type(structure).__name__}")  # noqa: TRY004 - bad data, not a bad call
    for key, typ in (("name", str), ("item", str), ("start", int), ("ops", list)):
        if not isinstance(structure.get(key), typ) or isinstance(structure.get(key), bool):
            raise ValueError(f"the structure needs '{key}' ({typ.__name__})")  # noqa: TRY004
    if structure["start"] < 1 or not structure["name"].strip() or not structure["item"].strip():
        raise ValueError("the structure needs a start >= 1, a name and an item")
    total = structure["start"]
    for j, op in enumerate(structure["ops"]):
        if not isinstance(op, dict) or op.get("op") not in OPS or not isinstance(op.get("k"), int):
            raise ValueError(f"operation {j + 1} must be {{'op': add|sub|mul, 'k': int}}, got {op!r}")
        bad = (op["op"] == "add" and op["k"] < 1) or (op["op"] == "sub" and not 1 <= op["k"] < total) or \
              (op["op"] == "mul" and op["k"] not in MUL_VERBS)
        if bad:
            raise ValueError(f"operation {j + 1} ({op['op']} {op['k']}) is out of range with a count of {total}")
        total = apply_op(total, op)
    return structure


def render_default(structure: dict) -> str:
    """The generator's original wording (the training form of q0)."""
    name, item = structure["name"], structure["item"]
    sentences = [f"{name} has {structure['start']} {item}."]
    for op in structure["ops"]:
        k, v = op["k"], op.get("v", 0)
        if op["op"] == "add":
            sentences.append([f"Then {name} buys {k} more {item}.", f"A friend gives {name} {k} more {item}."][v])
        elif op["op"] == "sub":
            sentences.append([f"Then {name} gives away {k} {item}.", f"{name} loses {k} {item}."][v])
        else:
            sentences.append(f"Then {name} {MUL_VERBS[k]} the number of {item}.")
    sentences.append(f"How many {item} does {name} have now?")
    return " ".join(sentences)


def make_structure(rng: random.Random, difficulty: int, num_ops: int | None = None) -> dict:
    """A random problem: numbers sized by `difficulty`, `num_ops` operations (default: difficulty)."""
    if not 1 <= difficulty <= 5:
        raise ValueError(f"difficulty must be in 1..5, got {difficulty}")
    num_ops = difficulty if num_ops is None else num_ops
    if not 1 <= num_ops <= 20:
        raise ValueError(f"num_ops must be in 1..20, got {num_ops}")
    max_n = MAX_N[difficulty]
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    total = rng.randint(2, max_n)
    structure = {"name": name, "item": item, "start": total, "ops": []}
    for _ in range(num_ops):
        op = _step(rng, total, max_n)
        structure["ops"].append(op)
        total = apply_op(total, op)
    return structure


def make_problem(rng: random.Random, difficulty: int, num_ops: int | None = None) -> dict:
    """{"question" (default form), "answer", "structure"}."""
    s = make_structure(rng, difficulty, num_ops)
    return {"question": render_default(s), "answer": str(evaluate(s)), "structure": s}


def generate_problems(n: int, difficulty: int = 2, seed: int = 0, id_prefix: str = "arith",
                      num_ops: int | None = None) -> list[dict]:
    """n rows {"id", "question", "answer", "structure"}; the same arguments give the same rows.
    `num_ops` (default: difficulty) sets the number of operations apart from the number sizes."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    same_ops = num_ops is None or num_ops == difficulty
    rng = random.Random(f"{seed}-{difficulty}" if same_ops else f"{seed}-{difficulty}-ops{num_ops}")
    return [{"id": f"{id_prefix}-d{difficulty}-s{seed}-{i}", **make_problem(rng, difficulty, num_ops)} for i in range(n)]
