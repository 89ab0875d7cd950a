"""Reading a chat-completions reply: the JSON body of an HTTP 200 -> a `Reply`.

Pure functions for the `openai` backend (`openai_backend.py` keeps the transport, the retries
and the counters). The backend calls `reply_usage` first, so the tokens a server reports are
counted even when the choice itself is unreadable, then `reply_from_choice`. A body that is not
a chat completion raises `BadReply`, which the backend retries like unparseable JSON.

What a reply can be:
- no choices: an empty answer (`text == raw == ""`);
- a refusal (the message's `refusal` field, or `finish_reason == "content_filter"`):
  `Reply.refusal`, with the refusal text (or the content) as `raw` and `text`;
- otherwise the first choice's message content, a string or a list of content parts joined.
"""

from __future__ import annotations

from tagrpo.neighbors.backends import Reply


class BadReply(ValueError):
    """The reply parsed as JSON but is not a chat completion."""


def reply_usage(data) -> tuple[int | None, int | None]:
    """(prompt_tokens, completion_tokens) as the server reported them, None where it did not.

    Raises `BadReply` when `data` has no `choices` list."""
    if not isinstance(data, dict) or not isinstance(data.get("choices"), list):
        raise BadReply("no 'choices' list in the reply")
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    pt, ct = usage.get("prompt_tokens"), usage.get("completion_tokens")
    return (pt if isinstance(pt, int) else None, ct if isinstance(ct, int) else None)


def _content_text(content) -> str | None:
    """Message content as text: a string as is, a list of content parts joined."""
    if isinstance(content, list):  # content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content


def reply_from_choice(
    data: dict, request_hash: str, prompt_tokens: int | None, completion_tokens: int | None
) -> Reply:
    """The `Reply` of the first choice of a body `reply_usage` accepted (raw text, not cleaned).

    Raises `BadReply` when that choice is not an object."""
    reply = Reply(
        request_hash=request_hash, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
    )
    if not data["choices"]:
        reply.text, reply.raw = "", ""
        return reply
    choice = data["choices"][0]
    if not isinstance(choice, dict):
        raise BadReply("a choice is not an object")
    message = choice.get("message") or {}
    content = _content_text(message.get("content") if isinstance(message, dict) else None)
    refusal = message.get("refusal") if isinstance(message, dict) else None
    if refusal or choice.get("finish_reason") == "content_filter":
        reply.refusal = True
        reply.raw = str(refusal or content or "")
        reply.text = reply.raw
        return reply
    reply.raw = content if isinstance(content, str) else ""
    reply.text = reply.raw
    return reply
