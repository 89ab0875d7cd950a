"""Built-in arithmetic word problems with a difficulty knob, for the CPU demo and benchmarks.

Difficulty d (1..5) sets the number of operations (d) and the size of the numbers, so a 135M
model can be placed in the regime where it is right only sometimes: the regime where GRPO's
per-question signal vanishes and TA-GRPO's neighbors help. Deterministic given the seed.
"""

from __future__ import annotations

import random

NAMES = ["Tom", "Anna", "Liam", "Mia", "Noah", "Emma", "Omar", "Sara", "Ravi", "Lena", "Ivan", "Yuki", "Paul", "Nora"]
ITEMS = ["apples", "marbles", "stickers", "books", "pencils", "cookies", "stamps", "coins", "cards", "shells"]


def _step(rng: random.Random, total: int, name: str, item: str, max_n: int) -> tuple[str, int]:
    """One operation applied to the running total, as a sentence."""
    ops = ["add", "sub", "mul"] if total <= max_n * 2 else ["add", "sub"]
    op = rng.choice(ops)
    if op == "add":
        k = rng.randint(2, max_n)
        return rng.choice([f"Then {name} buys {k} more {item}.", f"A friend gives {name} {k} more {item}."]), total + k
    if op == "sub" and total > 2:
        k = rng.randint(1, total - 1)
        return rng.choice([f"Then {name} gives away {k} {item}.", f"{name} loses {k} {item}."]), total - k
    k = rng.randint(2, 4)
    word = {2: "doubles", 3: "triples", 4: "quadruples"}[k]
    return f"Then {name} {word} the number of {item}.", total * k


def make_problem(rng: random.Random, difficulty: int) -> dict:
    if not 1 <= difficulty <= 5:
        raise ValueError(f"difficulty must be in 1..5, got {difficulty}")
    max_n = {1: 9, 2: 12, 3: 20, 4: 30, 5: 50}[difficulty]
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    total = rng.randint(2, max_n)
    sentences = [f"{name} has {total} {item}."]
    for _ in range(difficulty):
        s, total = _step(rng, total, name, item, max_n)
        sentences.append(s)
    sentences.append(f"How many {item} does {name} have now?")
    return {"question": " ".join(sentences), "answer": str(total)}


def generate_problems(n: int, difficulty: int = 2, seed: int = 0, id_prefix: str = "arith") -> list[dict]:
    """n rows {"id", "question", "answer"}; the same (n, difficulty, seed) gives the same rows."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = random.Random(f"{seed}-{difficulty}")
    return [{"id": f"{id_prefix}-d{difficulty}-s{seed}-{i}", **make_problem(rng, difficulty)} for i in range(n)]
