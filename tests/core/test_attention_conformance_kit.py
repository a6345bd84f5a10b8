"""The attention backend conformance kit passes the reference backend and fails broken
backends: one that skips writing the cache, caches padding tokens, swaps keys and values,
forgets the cached context, ignores the sliding window or the soft cap, assumes block
tables are in order, or answers in float32. Cases a backend rejects in `validate` are
skipped with reasons."""

from __future__ import annotations

import pytest
import torch

from pagoda.attention import AttentionBackend, AttentionImpl, AttentionMetadata, reference
from pagoda.attention.reference import ReferenceAttentionBackend, ReferenceAttentionImpl
from pagoda.testing import ATTENTION_CASES, check_attention_backend, dtype_name


class _NoCacheWriteImpl(ReferenceAttentionImpl):
    def forward(self, query, key, value, kv_cache, metadata: AttentionMetadata):
        return reference.paged_attention(
            query, kv_cache, metadata.block_tables, metadata.query_start_loc,
            metadata.seq_lens, self.scale, self.sliding_window, self.logits_soft_cap)


class _NewTokensOnlyImpl(ReferenceAttentionImpl):
    """Attends over this step's keys only, as if every sequence were a fresh prefill."""

    def forward(self, query, key, value, kv_cache, metadata: AttentionMetadata):
        reference.write_kv_cache(key, value, kv_cache, metadata.slot_mapping)
        starts = metadata.query_start_loc
        q_lens = (starts[1:] - starts[:-1]).to(torch.int32)
        return reference.paged_attention(
            query, kv_cache, metadata.block_tables, starts, q_lens, self.scale,
            self.sliding_window, self.logits_soft_cap)


class _NoWindowImpl(ReferenceAttentionImpl):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.sliding_window = None


class _NoSoftCapImpl(ReferenceAttentionImpl):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.logits_soft_cap = None


class _CachesPaddingImpl(ReferenceAttentionImpl):
    """Writes padding tokens (slot -1) too: into the cache's last slot, whoever owns it."""

    def forward(self, query, key, value, kv_cache, metadata: AttentionMetadata):
        flat = kv_cache.flatten(1, 2)  # a view: [2, slots, K, D]
        flat[0, metadata.slot_mapping] = key.to(kv_cache.dtype)
        flat[1, metadata.slot_mapping] = value.to(kv_cache.dtype)
        return reference.paged_attention(
            query, kv_cache, metadata.block_tables, metadata.query_start_loc,
            metadata.seq_lens, self.scale, self.sliding_window, self.logits_soft_cap)


class _SwapsKeyValueImpl(ReferenceAttentionImpl):
    def forward(self, query, key, value, kv_cache, metadata: AttentionMetadata):
        return super().forward(query, value, key, kv_cache, metadata)


class _OrderedBlocksImpl(ReferenceAttentionImpl):
    """Assumes each sequence's blocks were handed out in ascending order."""

    def forward(self, query, key, value, kv_cache, metadata: AttentionMetadata):
        reference.write_kv_cache(key, value, kv_cache, metadata.slot_mapping)
        return reference.paged_attention(
            query, kv_cache, metadata.block_tables.sort(dim=1).values,
            metadata.query_start_loc, metadata.seq_lens, self.scale, self.sliding_window,
            self.logits_soft_cap)


class _FloatOutputImpl(ReferenceAttentionImpl):
    def forward(self, query, key, value, kv_cache, metadata: AttentionMetadata):
        return super().forward(query, key, value, kv_cache, metadata).float()


def _backend(name: str, impl: type[AttentionImpl], **attrs: object) -> type[AttentionBackend]:
    return type(name, (ReferenceAttentionBackend,),
                {"name": name, "get_impl_cls": classmethod(lambda cls: impl), **attrs})


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_reference_backend_passes_every_case(dtype: torch.dtype) -> None:
    report = check_attention_backend(ReferenceAttentionBackend, dtype, seed=5)
    report.raise_for_failures()
    assert len(report.checked) == len(ATTENTION_CASES) and not report.skipped


@pytest.mark.parametrize(
    ("impl", "failing"),
    [
        (_NoCacheWriteImpl, None),
        (_NewTokensOnlyImpl, ("mixed batch", "decode only", "prefill chunks", "sliding window",
                              "logits soft cap", "window 7")),
        (_NoWindowImpl, ("sliding window", "window 7")),
        (_NoSoftCapImpl, ("logits soft cap", "window 7")),
        (_CachesPaddingImpl, ("mixed batch, GQA", "window 7")),  # padding and context
        (_SwapsKeyValueImpl, None),
        (_OrderedBlocksImpl, None),
        (_FloatOutputImpl, None),
    ],
    ids=["no-cache-write", "new-tokens-only", "no-window", "no-soft-cap", "caches-padding",
         "swaps-key-value", "ordered-blocks", "float-output"],
)
def test_broken_backend_fails(impl: type[AttentionImpl], failing: tuple[str, ...] | None) -> None:
    dtype = torch.bfloat16 if impl is _FloatOutputImpl else torch.float32
    report = check_attention_backend(_backend("broken", impl), dtype)
    failed = {f.split(": ", 1)[0] for f in report.failures}
    labels = {c.label for c in ATTENTION_CASES}
    expected = labels if failing is None else {
        lab for lab in labels if lab.startswith(failing)}
    assert failed == expected
    with pytest.raises(AssertionError, match=f"attention backend 'broken' in {dtype_name(dtype)}"):
        report.raise_for_failures()


def test_rejected_cases_are_skipped_with_reasons() -> None:
    backend = _backend("picky", ReferenceAttentionImpl, supports_logits_soft_cap=False,
                       supported_head_sizes=(32, 64, 128))
    report = check_attention_backend(backend, torch.bfloat16)
    assert report.ok
    assert sorted(report.skipped) == sorted([
        "mixed batch, MQA 6/1, head 80, block 5: head size 80 not in (32, 64, 128)",
        "logits soft cap 5: logits soft-capping is not supported",
        "window 7 + soft cap 5: logits soft-capping is not supported",
    ])
    assert len(report.checked) == len(ATTENTION_CASES) - 3


def test_raising_backend_is_a_failure_not_a_crash() -> None:
    class _Raises(ReferenceAttentionImpl):
        def forward(self, *args, **kwargs):
            raise RuntimeError("kernel launch failed")

    report = check_attention_backend(_backend("raises", _Raises), torch.float32)
    assert len(report.failures) == len(ATTENTION_CASES)
    assert all("raised RuntimeError('kernel launch failed')" in f for f in report.failures)
