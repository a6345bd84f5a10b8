"""`kv_cache_dtype`: fp8 and its aliases are accepted everywhere an option is, the block
size in bytes follows the cache element, and backends say whether they take an fp8 cache
(those that do not give the reason; a forced one names those that can)."""

from __future__ import annotations

import pytest
import torch

from pagoda.attention import FP8_KV_CACHE_DTYPE, AttentionConfig, KVCacheSpec
from pagoda.attention.selector import AttentionBackendError, select_attention_backend
from pagoda.cli.dataclass_args import dataclass_from_args
from pagoda.cli.main import build_parser
from pagoda.config import EngineConfig
from pagoda.config.values import kv_cache_dtype_name, parse_kv_cache_dtype
from pagoda.platforms import resolve_platform
from pagoda.plugins import get_registries, load_target


@pytest.mark.parametrize("spelling", ["fp8", "fp8_e4m3", "float8_e4m3fn", torch.float8_e4m3fn])
def test_fp8_spellings(spelling: str | torch.dtype) -> None:
    assert kv_cache_dtype_name(spelling) == "fp8"
    assert EngineConfig.from_kwargs(kv_cache_dtype=spelling).cache.kv_cache_dtype == "fp8"
    assert parse_kv_cache_dtype(spelling) is torch.float8_e4m3fn


def test_fp8_from_the_command_line() -> None:
    args = build_parser().parse_args(["serve", "--kv-cache-dtype", "fp8_e4m3"])
    assert dataclass_from_args(EngineConfig, args).cache.kv_cache_dtype == "fp8"


def test_other_dtypes_still_parse_and_bad_ones_are_refused() -> None:
    assert kv_cache_dtype_name("bf16") == "bfloat16" and parse_kv_cache_dtype("auto") is None
    assert parse_kv_cache_dtype("half") is torch.float16
    with pytest.raises(ValueError, match=r"kv_cache_dtype must be auto or one of \[.*'fp8'"):
        EngineConfig.from_kwargs(kv_cache_dtype="fp8_e5m2")
    with pytest.raises(ValueError, match="dtype must be auto or one of"):  # a model dtype
        EngineConfig.from_kwargs(dtype="fp8")


def test_block_bytes_follow_the_element_size() -> None:
    sizes = {d: KVCacheSpec(16, 8, 128, d).block_bytes
             for d in (torch.float32, torch.bfloat16, FP8_KV_CACHE_DTYPE)}
    assert sizes[FP8_KV_CACHE_DTYPE] == 2 * 16 * 8 * 128
    assert sizes[torch.float32] == 2 * sizes[torch.bfloat16] == 4 * sizes[FP8_KV_CACHE_DTYPE]


def _config(**overrides: object) -> AttentionConfig:
    fields: dict[str, object] = dict(num_heads=8, num_kv_heads=2, head_size=64,
                                     dtype=torch.bfloat16, kv_cache_dtype=FP8_KV_CACHE_DTYPE,
                                     block_size=16)
    return AttentionConfig(**(fields | overrides))  # type: ignore[arg-type]


FP8_BACKENDS = {"reference", "cpu_sdpa", "triton"}


def test_which_backends_take_an_fp8_cache() -> None:
    """Those that do validate it; the others say so, with what they take instead."""
    seen = set()
    for entry in get_registries().attention_backends:
        try:
            backend = load_target(entry.spec.backend)
        except ImportError:  # e.g. the TPU backends without torch-xla: checked below
            continue
        seen.add(entry.spec.name)
        fp8 = FP8_KV_CACHE_DTYPE in backend.kv_cache_dtypes()
        assert fp8 == (entry.spec.name in FP8_BACKENDS), entry.spec.name
        reasons = [r for r in backend.validate(_config()) if "kv cache dtype" in r]
        assert reasons == ([] if fp8 else [
            f"kv cache dtype fp8 not supported (it supports "
            f"{', '.join(str(d).removeprefix('torch.') for d in backend.kv_cache_dtypes())})"])
    assert {"reference", "cpu_sdpa", "triton", "template", "fused_sdpa"} <= seen


def test_tpu_backends_declare_no_fp8() -> None:
    from pagoda_tpu.attention import XlaAttentionBackend

    assert FP8_KV_CACHE_DTYPE not in XlaAttentionBackend.kv_cache_dtypes()
    assert "kv cache dtype fp8 not supported" in "; ".join(XlaAttentionBackend.validate(_config()))


def test_cpu_selects_cpu_sdpa_for_fp8() -> None:
    cpu = resolve_platform("cpu")
    assert select_attention_backend(cpu, _config()).name == "cpu_sdpa"
    assert select_attention_backend(cpu, _config(logits_soft_cap=30.0)).name == "cpu_sdpa"


def test_forced_backend_names_the_ones_that_can() -> None:
    template = resolve_platform("template")
    with pytest.raises(AttentionBackendError) as err:
        select_attention_backend(template, _config(), forced="template")
    assert str(err.value) == ("Attention backend 'template' cannot be used: kv cache dtype fp8 "
                              "not supported (it supports float32, float16, bfloat16) (backends "
                              "on 'template' that can: reference)")
    with pytest.raises(AttentionBackendError) as err:
        select_attention_backend(template, _config(head_size=0, num_heads=3), forced="template")
    assert str(err.value).endswith("(no other backend on 'template' can)")
