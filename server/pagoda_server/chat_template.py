"""Conversations to prompt token ids through the model's chat template."""

from __future__ import annotations

from typing import Any

from jinja2 import TemplateError

from pagoda_server.errors import bad_request


def render_chat(tokenizer: Any, messages: list[dict[str, str]], *,
                add_generation_prompt: bool = True, continue_final_message: bool = False,
                template_kwargs: dict[str, Any] | None = None) -> list[int]:
    """Token ids of `messages` rendered by the chat template; 400 when it cannot be."""
    if tokenizer.chat_template is None:
        raise bad_request("this model has no chat template; start the server with "
                          "--chat-template", "messages")
    if continue_final_message and messages[-1]["role"] != "assistant":
        raise bad_request("continue_final_message needs a final assistant message",
                          "continue_final_message")
    try:
        ids = tokenizer.apply_chat_template(
            messages, tokenize=True, add_generation_prompt=add_generation_prompt,
            continue_final_message=continue_final_message, **(template_kwargs or {}))
    except (TemplateError, ValueError, TypeError, KeyError, IndexError) as exc:
        raise bad_request(f"the chat template could not render these messages: {exc}",
                          "messages") from None
    if isinstance(ids, dict) or hasattr(ids, "input_ids"):  # BatchEncoding in transformers 5
        ids = ids["input_ids"]
    return list(ids)
