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
                              "logits soft cap", "window 7", "verify step")),
        (_NoWindowImpl, ("sliding window", "window 7", "verify step")),
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


# The fp8 KV cache: the kit quantizes with KV_SCALES on both sides.

FP8 = torch.float8_e4m3fn


def _round_toward_zero_fp8(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x / scale cut to the e4m3 value next to it toward zero (not rounded to nearest)."""
    y = (x.float() / scale).clamp(-448, 448)
    nearest = y.to(FP8)
    over = nearest.float().abs() > y.abs()
    # one e4m3 step below the nearest value where it rounded away from zero
    down = torch.where(over, nearest.view(torch.uint8) - 1, nearest.view(torch.uint8))
    return torch.where(nearest.float() == 0, nearest.view(torch.uint8), down).view(FP8)


class _UnscaledWriteImpl(ReferenceAttentionImpl):
    """Stores keys and values without dividing by their scales (reads them scaled)."""

    def forward(self, query, key, value, kv_cache, metadata, *, kv_scales=None):
        ones = torch.ones_like(kv_scales)
        reference.write_kv_cache(key, value, kv_cache, metadata.slot_mapping, ones)
        return reference.paged_attention(
            query, kv_cache, metadata.block_tables, metadata.query_start_loc,
            metadata.seq_lens, self.scale, self.sliding_window, self.logits_soft_cap, kv_scales)


class _UnscaledReadImpl(ReferenceAttentionImpl):
    """Reads stored values as they are (scales forgotten on the way back)."""

    def forward(self, query, key, value, kv_cache, metadata, *, kv_scales=None):
        reference.write_kv_cache(key, value, kv_cache, metadata.slot_mapping, kv_scales)
        return reference.paged_attention(
            query, kv_cache, metadata.block_tables, metadata.query_start_loc,
            metadata.seq_lens, self.scale, self.sliding_window, self.logits_soft_cap,
            torch.ones_like(kv_scales))


class _SwappedScalesImpl(ReferenceAttentionImpl):
    def forward(self, query, key, value, kv_cache, metadata, *, kv_scales=None):
        return super().forward(query, key, value, kv_cache, metadata,
                               kv_scales=kv_scales.flip(0))


class _TruncatingImpl(ReferenceAttentionImpl):
    """Quantizes toward zero instead of to the nearest e4m3 value."""

    def forward(self, query, key, value, kv_cache, metadata, *, kv_scales=None):
        keep = metadata.slot_mapping >= 0
        slots = metadata.slot_mapping[keep]
        flat = kv_cache.flatten(1, 2)
        flat[0, slots] = _round_toward_zero_fp8(key[keep], kv_scales[0])
        flat[1, slots] = _round_toward_zero_fp8(value[keep], kv_scales[1])
        return reference.paged_attention(
            query, kv_cache, metadata.block_tables, metadata.query_start_loc,
            metadata.seq_lens, self.scale, self.sliding_window, self.logits_soft_cap, kv_scales)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_reference_backend_passes_every_case_with_an_fp8_cache(dtype: torch.dtype) -> None:
    report = check_attention_backend(ReferenceAttentionBackend, dtype, seed=6,
                                     kv_cache_dtype=FP8)
    report.raise_for_failures()
    assert len(report.checked) == len(ATTENTION_CASES) and not report.skipped
    assert ", fp8 cache" in report.subject


@pytest.mark.parametrize("impl", [_UnscaledWriteImpl, _UnscaledReadImpl, _SwappedScalesImpl,
                                  _TruncatingImpl],
                         ids=["unscaled-write", "unscaled-read", "swapped-scales", "truncating"])
def test_broken_fp8_backend_fails(impl: type[AttentionImpl]) -> None:
    report = check_attention_backend(_backend("broken", impl), torch.float32,
                                     kv_cache_dtype=FP8)
    assert {f.split(": ", 1)[0] for f in report.failures} == {c.label for c in ATTENTION_CASES}


def test_fp8_cache_declined_without_support() -> None:
    backend = _backend("no_fp8", ReferenceAttentionImpl, supported_kv_cache_dtypes=None)
    report = check_attention_backend(backend, torch.bfloat16, kv_cache_dtype=FP8)
    assert report.ok and not report.checked
    assert {s.split(": ", 1)[1] for s in report.skipped} == {
        "kv cache dtype fp8 not supported (it supports float32, float16, bfloat16)"}
