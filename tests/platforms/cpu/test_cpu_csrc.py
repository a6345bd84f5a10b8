"""pagoda-cpu's native kernels (`pagoda_cpu.csrc`): built, chosen by the CPU's flags or
the environment, certified against core's references on every instruction-set path this
CPU runs, and absent without harm."""

from __future__ import annotations

import dataclasses
import logging
import sys
from collections.abc import Iterator

import numpy as np
import pytest
import torch

from pagoda.ops.registry import OpTable
from pagoda.quant.rtn import group_weight
from pagoda.quant.tensors import round_activations
from pagoda.testing import (
    ATTENTION_CASES,
    DTYPES,
    attention_backends,
    check_attention_backend,
    check_kernel_provider,
    dtype_name,
)
from pagoda.testing import kernel_providers as registered
from pagoda_cpu import csrc, csrc_ops, quant_ops

C = pytest.importorskip("pagoda_cpu._C", reason="pagoda-cpu's native kernels are not built "
                        "(test_cpu_platform.py fails where that is a build failure)")
ISAS = csrc.cpu_isas()
CSRC_PROVIDERS = [e for e in registered("cpu") if e.provider.name == "cpu_csrc"]


@pytest.fixture(params=ISAS)
def isa(request: pytest.FixtureRequest) -> Iterator[str]:
    """Each instruction set this CPU runs, active for the test; the default after."""
    csrc.native()
    default = C.isa()
    csrc.use_isa(C, request.param)
    yield request.param
    C.set_isa(default)


def test_isa_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "generic" in ISAS and C.has_isa("generic")
    monkeypatch.delenv(csrc.ISA_ENV, raising=False)
    monkeypatch.setenv(csrc.ATEN_ISA_ENV, "default")
    assert csrc.requested_isa() == "generic"
    monkeypatch.setenv(csrc.ISA_ENV, "AVX2")  # ours wins over PyTorch's
    assert csrc.requested_isa() == "avx2"
    monkeypatch.setenv(csrc.ISA_ENV, "sse9")
    with pytest.raises(ValueError, match="PAGODA_CPU_ISA='sse9'"):
        csrc.requested_isa()
    with pytest.raises(ValueError, match="cannot run the neon kernels"):
        csrc.use_isa(C, "neon")


def test_default_isa_is_the_best_this_cpu_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    for env in (csrc.ISA_ENV, csrc.ATEN_ISA_ENV):
        monkeypatch.delenv(env, raising=False)
    csrc.native.cache_clear()
    try:
        assert csrc.native() is C and C.isa() == ISAS[0]
    finally:
        csrc.native.cache_clear()
        csrc.native()


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
@pytest.mark.parametrize("entry", CSRC_PROVIDERS, ids=lambda e: e.id)
def test_provider_matches_reference_on_every_isa(entry, dtype: torch.dtype, isa: str) -> None:
    report = check_kernel_provider(entry.provider, dtype, plugin=entry.plugin, seed=5)
    report.raise_for_failures()
    assert report.checked and not report.skipped


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_name)
def test_decode_attention_matches_reference_on_every_isa(dtype: torch.dtype, isa: str) -> None:
    """cpu_sdpa's decodes run the native kernel in these dtypes (GQA, windows, soft caps)."""
    (backend,) = [b for b in attention_backends("cpu") if b.name == "cpu_sdpa"]
    report = check_attention_backend(backend.load(), dtype, seed=3)
    report.raise_for_failures()
    assert len(report.checked) == len(ATTENTION_CASES)


@pytest.mark.parametrize("threads", [1, 2, 4])
@pytest.mark.parametrize("window,soft_cap", [(0, 0.0), (100, 0.0), (0, 5.0)])
def test_decode_attention_splits_few_sequences_across_threads(
        window: int, soft_cap: float, threads: int, isa: str) -> None:
    """With fewer (sequence, KV head) pairs than twice the threads, each pair's positions
    are split into parts whose softmax sums are merged after: the same output, in float64
    from the gathered rows, at every thread count (1: one part; 4: three, some of them empty
    for the short sequences, all of them for the empty one)."""
    gen = torch.Generator().manual_seed(threads)
    heads, block, lens = 4, 16, [300, 1, 0]
    cache = torch.randn(2, 64, block, 1, 64, generator=gen)
    tables = torch.randperm(64, generator=gen, dtype=torch.int32)[:57].view(3, 19)
    query = torch.randn(3, heads, 64, generator=gen)
    want = torch.zeros(3, heads, 64, dtype=torch.float64)
    for b, n in enumerate(lens):
        pos = torch.arange(max(0, n - window) if window else 0, n)
        slots = tables[b, pos // block].long() * block + pos % block
        k, v = (cache[i].reshape(-1, 64)[slots].double() for i in (0, 1))
        scores = query[b].double() @ k.T * 0.125
        if soft_cap:
            scores = soft_cap * torch.tanh(scores / soft_cap)
        want[b] = scores.softmax(-1) @ v if n else 0
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        got = C.decode_attention(query, cache, tables, torch.tensor(lens), 0.125, window,
                                 soft_cap)
    finally:
        torch.set_num_threads(before)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("symmetric", [False, True], ids=["offsets", "symmetric"])
@pytest.mark.parametrize("act_block", [None, 32], ids=["x", "int8-x"])
@pytest.mark.parametrize("bits,group", [(4, 32), (8, 32), (4, 128)])
@pytest.mark.parametrize("rows", [1, 5, "gemv", "gemv+1", "gemm", "gemm+1"])
def test_woq_kernel_paths(bits: int, group: int, rows: int | str, act_block: int | None,
                          symmetric: bool, isa: str) -> None:
    """The GEMV kernel, the GEMM kernel (with partial tiles: 77 outputs, row counts past
    a whole tile) and the dequantize + matmul path, float32 against the reference's
    float64 product; with activations rounded to int8 blocks (a GGUF's), of the rounded
    activations (the GEMV kernel then sums the integers). Symmetric codes (Q4_0, Q8_0)
    are packed without their offsets, which each kernel derives from the scales."""
    gen = torch.Generator().manual_seed(bits)
    weight = dataclasses.replace(
        group_weight(torch.randn(77, 256, generator=gen), bits, group, symmetric=symmetric),
        act_block=act_block)
    prepared = csrc_ops.prepare_woq(weight, torch.float32)
    assert isinstance(prepared, csrc_ops.PackedWoqWeight)
    assert (prepared.offsets.numel() == 0) == symmetric
    assert prepared.gemm_max_rows is not None and prepared.gemm_max_rows > prepared.gemv_max_rows
    if isinstance(rows, str):
        kernel, _, extra = rows.partition("+")
        rows = getattr(prepared, f"{kernel}_max_rows") + int(extra or 0)
    x = torch.randn(rows, 256, generator=gen)
    bias = torch.randn(77, generator=gen)
    xr = x if act_block is None else round_activations(x, act_block)
    want = xr.double() @ weight.dequantize().double().T + bias.double()
    got = csrc_ops.woq_linear(x, prepared, bias)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-4)
    for kernel in (C.woq_gemv, C.woq_gemm):  # each kernel at every row count
        got = kernel(x, prepared.codes, prepared.scales, prepared.offsets, bits, bias,
                     act_block or 0)
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-4)
    dense = C.woq_dequantize(prepared.codes, prepared.scales, prepared.offsets, bits)
    torch.testing.assert_close(dense, weight.dequantize(), rtol=1e-6, atol=1e-6)  # fused


@pytest.mark.parametrize("k", [256, 1280])
def test_gemv_at_every_row_count_of_its_passes(k: int, isa: str) -> None:
    """The GEMV kernel takes up to eight rows a pass over the weights where they fit L1
    beside them (K up to 1024 on AVX-512), four otherwise: every row count through two
    passes and their remainders, against the float64 product."""
    gen = torch.Generator().manual_seed(k)
    weight = group_weight(torch.randn(40, k, generator=gen), 4, 32, symmetric=False)
    prepared = csrc_ops.prepare_woq(weight, torch.float32)
    want_w = weight.dequantize().double().T
    for rows in range(1, 18):
        x = torch.randn(rows, k, generator=gen)
        got = C.woq_gemv(x, prepared.codes, prepared.scales, prepared.offsets, 4, None)
        torch.testing.assert_close(got.double(), x.double() @ want_w, rtol=1e-5, atol=1e-4)


def test_activations_round_as_the_reference_rounds_them(isa: str) -> None:
    """The kernels' int8 blocks are `round_activations`' bit for bit: through an identity
    weight (8-bit codes 129 on the diagonal, 128 elsewhere, scale 1, offset -128) the GEMV
    kernel's output is the rounded x itself. Blocks whose amax is 127 (scale 1) put
    values on halves, which round to even; an all-zero block stays zero."""
    k = 96
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(5, k, generator=gen) * 3
    x[0, :32] = torch.arange(32) - 15.5  # halves, amax 15.5: scale 15.5 / 127
    x[1, :32] = torch.cat([torch.tensor([127.0]), torch.arange(31) * 0.5 - 7.5])  # scale 1
    x[2, 32:64] = 0
    codes = torch.full((k, k), 128, dtype=torch.uint8)
    codes.diagonal().fill_(129)
    ones = torch.ones(k, k // 32)
    got = C.woq_gemv(x, codes, ones, -128 * ones, 8, None, 32)
    want = round_activations(x, 32)
    assert torch.equal(got, want)
    assert torch.equal(want[1, 1:32], torch.round(x[1, 1:32]))  # halves to even
    assert not want[2, 32:64].any()


def test_a_weight_too_large_to_dequantize_takes_the_gemm_kernel_for_many_rows(
        monkeypatch: pytest.MonkeyPatch) -> None:
    weight = group_weight(torch.randn(40, 64), 8, 32, symmetric=True)
    monkeypatch.setattr(csrc_ops, "DEQUANTIZE_MAX_BYTES", 40 * 64 * 4 - 1)
    prepared = csrc_ops.prepare_woq(weight, torch.float32)
    assert prepared.gemm_max_rows is None
    monkeypatch.setattr(C, "woq_dequantize", None)  # never called: the GEMM kernel serves
    x = torch.randn(600, 64)
    torch.testing.assert_close(csrc_ops.woq_linear(x, prepared).double(),
                               x.double() @ weight.dequantize().double().T, rtol=1e-5, atol=1e-4)


def test_kernels_split_their_work_across_pytorchs_threads() -> None:
    """The build runs ATen's parallel_for on PyTorch's threads (not one thread: setup.py's
    OPENMP), and a GEMV split across them gives the single-thread result exactly."""
    weight = group_weight(torch.randn(1100, 256, generator=torch.Generator().manual_seed(0)),
                          4, 32, symmetric=False)
    prepared = csrc_ops.prepare_woq(weight, torch.float32)
    x = torch.randn(3, 256)
    threads = torch.get_num_threads()
    try:
        results = {}
        for n in (1, 2):
            torch.set_num_threads(n)
            assert C.parallel_tasks(1000, 10) == n
            results[n] = csrc_ops.woq_linear(x, prepared)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(results[1], results[2])


def test_4bit_packing_is_ggufs_block_layout() -> None:
    """A Q4_0 block's 16 bytes (low nibbles: inputs 0-15, high: 16-31) are the packed codes."""
    raw = np.random.default_rng(0).integers(0, 256, (3, 2, 16), dtype=np.uint8)
    codes = np.concatenate([raw & 0x0F, raw >> 4], axis=-1).reshape(3, 64)
    packed = csrc_ops.pack_codes(torch.from_numpy(codes), 4)
    assert torch.equal(packed, torch.from_numpy(raw.reshape(3, 32)))


def test_unsupported_weights_fall_back_to_pytorch_ops() -> None:
    weight = group_weight(torch.randn(16, 48), 4, 16, symmetric=True)  # groups of 16
    assert csrc_ops.native_reason(weight) == "groups of 16 are not 32 times a power of two"
    prepared = csrc_ops.prepare_woq(weight, torch.float32)
    assert isinstance(prepared, quant_ops.CpuQuantWeight)
    x = torch.randn(2, 48)
    torch.testing.assert_close(csrc_ops.woq_linear(x, prepared), quant_ops.woq_linear(x, prepared))


def test_without_the_build_the_cpu_runs_on_pytorch_ops(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    assert OpTable("cpu").providers["woq_linear"] == "cpu/cpu_csrc"
    csrc.native.cache_clear()
    try:
        with monkeypatch.context() as patch, caplog.at_level(logging.WARNING):
            patch.setitem(sys.modules, "pagoda_cpu._C", None)  # import fails: not built
            assert csrc.unavailable() == "pagoda-cpu's native kernels are not built"
            assert csrc.native() is None
            assert OpTable("cpu").providers["woq_linear"] == "cpu/cpu_native"
        assert sum("not built" in r.message for r in caplog.records) == 1  # logged once
    finally:
        csrc.native.cache_clear()
    assert OpTable("cpu").providers["woq_linear"] == "cpu/cpu_csrc"
