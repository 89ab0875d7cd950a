"""Turning a question into prompt token ids with the model's chat template."""

from __future__ import annotations

DEFAULT_PROMPT_TEMPLATE = "{question}\nPlease reason step by step, and put your final answer within \\boxed{{}}."


def build_prompt_ids(tokenizer, question: str, template: str = DEFAULT_PROMPT_TEMPLATE, system: str | None = None) -> list[int]:
    """Token ids of the chat-formatted user turn plus the assistant generation prompt.

    Falls back to the raw text when the tokenizer has no chat template.
    """
    content = template.format(question=question)
    if getattr(tokenizer, "chat_template", None):
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": content}]
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return tokenizer(text, add_special_tokens=False)["input_ids"]
    return tokenizer(content, add_special_tokens=True)["input_ids"]
