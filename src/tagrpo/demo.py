"""The embedded-default demo: SmolLM2-135M-Instruct answers three built-in questions, each scored
with `math_reward`. Offline, CPU, about a minute (the first run also converts the GGUF once)."""

from __future__ import annotations

DEMO_QUESTIONS = [
    ("What is 7 + 5? Put the final answer in \\boxed{}.", "12"),
    ("Sam has 3 bags with 4 apples in each bag. How many apples does Sam have? Put the final answer in \\boxed{}.", "12"),
    ("A book costs $8 and a pen costs $2. How much do 2 books and 1 pen cost? Put the final answer in \\boxed{}.", "18"),
]


def run_answer_demo(model_name: str = "smollm2-135m-instruct", max_new_tokens: int = 128) -> list[dict]:
    import torch
    from rich.console import Console
    from rich.table import Table

    from tagrpo.models import load_policy
    from tagrpo.rewards import extract_final_answer, math_reward

    console = Console()
    console.print(f"[bold]tagrpo demo[/bold]: loading {model_name} (offline, CPU) ...")
    model, tok = load_policy(model_name)
    torch.manual_seed(0)
    prompts = [tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False) for q, _ in DEMO_QUESTIONS]
    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tok.pad_token_id)
    rows = []
    table = Table(title="SmolLM2-135M-Instruct, greedy")
    for col in ("question", "answer (tail)", "extracted", "gold", "reward"):
        table.add_column(col, overflow="fold")
    for (q, gold), seq in zip(DEMO_QUESTIONS, out):
        text = tok.decode(seq[enc["input_ids"].shape[1]:], skip_special_tokens=True)
        r = math_reward(text, gold)
        rows.append({"question": q, "completion": text, "gold": gold, "reward": r})
        table.add_row(q, text.strip()[-160:], str(extract_final_answer(text)), gold, f"{r:.0f}")
    console.print(table)
    return rows
