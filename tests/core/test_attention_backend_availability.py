"""A backend that cannot run in this process at all (its SDK is missing) says why through
`AttentionBackend.unavailable_reason`; `validate` gives that reason first, before what the
model asks for that the backend lacks."""

from __future__ import annotations

import torch

from pagoda.attention import AttentionConfig
from pagoda.attention.reference import ReferenceAttentionBackend

CONFIG = AttentionConfig(num_heads=8, num_kv_heads=2, head_size=64, dtype=torch.float32,
                         kv_cache_dtype=torch.float32, block_size=16, logits_soft_cap=30.0)


class WithoutSdk(ReferenceAttentionBackend):
    name = "without_sdk"
    supports_logits_soft_cap = False

    @classmethod
    def unavailable_reason(cls) -> str | None:
        return "bolt_sdk is not installed: ask Bolt"


class Available(WithoutSdk):
    @classmethod
    def unavailable_reason(cls) -> str | None:
        return None


def test_available_by_default() -> None:
    assert ReferenceAttentionBackend.unavailable_reason() is None
    assert ReferenceAttentionBackend.validate(CONFIG) == []


def test_validate_gives_the_reason_first() -> None:
    assert WithoutSdk.validate(CONFIG) == ["bolt_sdk is not installed: ask Bolt",
                                           "logits soft-capping is not supported"]
    assert WithoutSdk.validate(AttentionConfig(8, 2, 64, torch.float32, torch.float32, 16)) == [
        "bolt_sdk is not installed: ask Bolt"]
    assert Available.validate(CONFIG) == ["logits soft-capping is not supported"]
