"""Shared bits for the training tests: tiny configs and in-memory rows with neighbors."""

from __future__ import annotations

from tagrpo.train.config import load_config

ROWS = [
    {"id": i, "question": q, "answer": a, "neighbors": nb}
    for i, (q, a, nb) in enumerate([
        ("Tom has 3 apples and buys 5 more. How many apples does he have?", "8",
         ["How many apples does Tom have if he has 3 and buys 5 more?", "Given: Tom has 3 apples; he buys 5. Find: his apples.",
          "Solve: Ann has 3 apples and buys 5 more. How many apples does Ann have?"]),
        ("What is 12 plus 7?", "19", ["Compute 12 + 7.", "Find the sum of 12 and 7.", "Given: 12 and 7. Find: their sum."]),
        ("Alice shares 24 cookies equally among 4 friends. How many does each get?", "6",
         ["24 cookies are shared equally by 4 friends. How many cookies does each friend get?",
          "Given: 24 cookies, 4 friends, equal shares. Find: cookies per friend.",
          "Bob shares 24 cookies equally among 4 friends. How many does each get?"]),
        ("What is 9 times 3?", "27", ["Compute 9 * 3.", "Find the product of 9 and 3.", "Given: 9 and 3. Find: 9 times 3."]),
    ])
]


def tiny_cfg(tmp_path, *overrides: str):
    base = [
        f"output_dir={tmp_path}", "model=tiny", "steps=1", "num_neighbors=2", "samples_per_variant=2",
        "questions_per_step=2", "max_new_tokens=6", "lr=0.01", "beta=0.0", "autocast=none",
        "micro_batch_tokens=256", "generate_batch_size=16", "tensorboard=false", "save_final=false",
        "reward=tagrpo.rewards.toy:parity_reward", "warmup_ratio=0", "schedule=constant", "neighbors=column",
    ]
    return load_config(None, base + list(overrides))


def inf_on_even_hash(completion: str, answer: str) -> float:
    """A broken plug-in reward: inf for about half the completions, NaN for a few, else parity."""
    import zlib

    h = zlib.crc32(completion.encode("utf-8", "replace"))
    return float("inf") if h % 2 == 0 else (float("nan") if h % 7 == 0 else 1.0)


def direct_logp(model, prompt: list[int], response: list[int]):
    """log pi(response | prompt) per token from one unpadded (prompt + response) forward: (T,)."""
    import torch

    ids = torch.tensor([prompt + response])  # (1, L)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()  # (T, V)
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(response).unsqueeze(-1)).squeeze(-1)  # (T,)
