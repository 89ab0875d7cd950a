"""Tiny random models for tests and CI: a small byte-level BPE tokenizer trained in memory and a
2-layer Llama built from a config. No hub, no files needed."""

from __future__ import annotations

import os

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
_CORPUS = [
    "Tom has 3 apples and buys 5 more. How many apples does he have? The answer is \\boxed{8}.",
    "What is 12 plus 7? Solve step by step. Find: the total. Given: x = 4, y = 9.",
    "Alice, Bob, Carol, Dave and Eve share 24 cookies equally. Each gets 6.",
    "0 1 2 3 4 5 6 7 8 9 10 100 1000 + - * / = ( ) { } $ \\frac \\boxed #### answer question",
]


def make_tiny_tokenizer(vocab_size: int = 384):
    """A PreTrainedTokenizerFast with <|im_start|>, <|im_end|> (eos) and <pad>, and a chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<pad>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tk.train_from_iterator(_CORPUS * 4, trainer=trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk, pad_token="<pad>", eos_token="<|im_end|>", bos_token="<|im_start|>"
    )
    tok.chat_template = CHAT_TEMPLATE
    tok.padding_side = "left"
    return tok


def make_tiny_model(tokenizer=None, *, layers: int = 2, hidden: int = 64, seed: int = 0):
    """(model, tokenizer): a random LlamaForCausalLM small enough for unit tests."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = tokenizer or make_tiny_tokenizer()
    cfg = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model, tokenizer


def save_tiny_model(path: str | os.PathLike, **kwargs) -> str:
    """Write a tiny random model and its tokenizer to `path` (HF format); returns the path."""
    model, tok = make_tiny_model(**kwargs)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)
