"""Turning a question into prompt token ids: the user-turn template inside the model's chat
template, or the same text as raw text (no chat template, as the paper's evaluation scripts do)."""

from __future__ import annotations

DEFAULT_PROMPT_TEMPLATE = "{question}\nPlease reason step by step, and put your final answer within \\boxed{{}}."


def build_prompt_ids(tokenizer, question: str, template: str = DEFAULT_PROMPT_TEMPLATE, system: str | None = None,
                     *, chat_template: bool = True) -> list[int]:
    """Token ids of the chat-formatted user turn plus the assistant generation prompt.

    With `chat_template=False`, or when the tokenizer has no chat template, the raw text
    `template.format(question=question)` tokenized with the tokenizer's own special tokens (a BOS
    where the tokenizer adds one); `system` needs the chat template and is refused without it.
    """
    content = template.format(question=question)
    if chat_template and getattr(tokenizer, "chat_template", None):
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": content}]
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return tokenizer(text, add_special_tokens=False)["input_ids"]
    if not chat_template and system:
        raise ValueError("a system message needs the chat template; drop the system message or use the chat template")
    return tokenizer(content, add_special_tokens=True)["input_ids"]
