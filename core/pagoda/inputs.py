"""What the engine takes as a prompt."""

from __future__ import annotations

from typing import Any

PromptInput = str | list[int] | dict[str, Any]
"""Text, token ids, or {"prompt": text} / {"prompt_token_ids": ids}; for a pooling model
also {"prompt_token_ids": ids, "token_type_ids": segments} (a cross-encoder's text pair,
as its tokenizer encodes it)."""
