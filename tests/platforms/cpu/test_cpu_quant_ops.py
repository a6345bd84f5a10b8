"""What conformance does not check of the CPU's quantized linears: the path each weight
takes (by activation dtype and native bf16), that dequantized layers are logged, and that
weights said to stay quantized do."""

from __future__ import annotations

import logging
import os
import platform
import subprocess
import sys
import textwrap

import pytest
import torch

from pagoda.ops.quant_reference import fp8_linear as ref_fp8
from pagoda.ops.quant_reference import int8_linear as ref_int8
from pagoda.ops.quant_reference import woq_linear as ref_woq
from pagoda.quant.rtn import fp8_weight, group_weight, int8_weight
from pagoda.quant.tensors import GroupQuantWeight
from pagoda.testing.tolerances import mismatch, op_tolerance
from pagoda_cpu import quant_ops
from pagoda_cpu.quant_layouts import DenseLayout, Int4Layout, Int8Layout

BF16 = torch.bfloat16


@pytest.fixture(autouse=True)
def _fresh_log(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(quant_ops, "_logged", set())


def _inputs(m: int, k: int, n: int, dtype: torch.dtype, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(m, k, generator=gen) * 2).to(dtype)
    w = torch.randn(n, k, generator=gen) * k**-0.5
    bias = (torch.randn(n, generator=gen) * 0.1).to(dtype)
    return x, w, bias


def _assert_matches(op: str, got: torch.Tensor, want: torch.Tensor) -> None:
    problem = mismatch("output", got, want, op_tolerance(op, want.dtype))
    assert problem is None, problem


@pytest.mark.parametrize("native_bf16", [True, False], ids=["native-bf16", "no-bf16"])
def test_bf16_activations_path_by_capability(native_bf16: bool) -> None:
    """bfloat16 activations: 4-bit groups use the int4 kernel either way; dense layers are
    bfloat16 with native bf16 and float32 without. Every path matches the reference."""
    x, w, bias = _inputs(5, 256, 64, BF16)
    dense = BF16 if native_bf16 else torch.float32

    i4 = group_weight(w, 4, 32, False)
    prepared = quant_ops.prepare_woq(i4, BF16, native_bf16=native_bf16)
    _assert_matches("woq_linear", quant_ops.woq_linear(x, prepared, bias), ref_woq(x, i4, bias))
    assert isinstance(prepared.layout, Int4Layout)

    q8 = group_weight(w, 8, 32, True)
    prepared = quant_ops.prepare_woq(q8, BF16, native_bf16=native_bf16)
    _assert_matches("woq_linear", quant_ops.woq_linear(x, prepared, bias), ref_woq(x, q8, bias))
    assert isinstance(prepared.layout, DenseLayout) and prepared.layout.weight.dtype == dense

    for block in (None, (128, 128)):
        f8 = fp8_weight(w, block)
        prepared = quant_ops.prepare_fp8(f8, BF16, native_bf16=native_bf16)
        _assert_matches("fp8_linear", quant_ops.fp8_linear(x, prepared, bias),
                        ref_fp8(x, f8, bias))
        assert isinstance(prepared.layout, DenseLayout)
        assert prepared.layout.weight.dtype == dense

    i8 = int8_weight(w)
    prepared = quant_ops.prepare_int8(i8, BF16, native_bf16=native_bf16)
    _assert_matches("int8_linear", quant_ops.int8_linear(x, prepared, bias),
                    ref_int8(x, i8, bias))
    assert isinstance(prepared.layout, Int8Layout if quant_ops.int_mm_exact() else DenseLayout)


@pytest.mark.parametrize(("env", "native"), [("0", False), ("1", True)])
@pytest.mark.parametrize("dtype", [BF16, torch.float16], ids=str)
def test_env_overrides_detection(monkeypatch: pytest.MonkeyPatch, env: str, native: bool,
                                 dtype: torch.dtype) -> None:
    variable, detect = ((quant_ops.FAST_BF16_ENV, quant_ops.fast_bf16) if dtype == BF16
                        else (quant_ops.FAST_FP16_ENV, quant_ops.fast_fp16))
    monkeypatch.setenv(variable, env)
    assert detect() is native
    x, w, bias = _inputs(2, 128, 32, dtype)
    weight = fp8_weight(w)
    prepared = quant_ops.prepare_fp8(weight, dtype)  # no native_*: the detection
    assert prepared.layout.weight.dtype == (dtype if native else torch.float32)
    _assert_matches("fp8_linear", quant_ops.fp8_linear(x, prepared, bias),
                    ref_fp8(x, weight, bias))


@pytest.mark.parametrize("native_fp16", [True, False], ids=["native-fp16", "no-fp16"])
def test_float32_and_float16_activations_run_int4_weights_dense(
        caplog: pytest.LogCaptureFixture, native_fp16: bool) -> None:
    """The int4 kernel is scalar for float32 / float16 activations: dense there, logged;
    a float16 dense weight only where float16 matmuls are native, else float32."""
    for dtype in (torch.float32, torch.float16):
        x, w, bias = _inputs(3, 256, 48, dtype)
        weight = group_weight(w, 4, 128, True)
        with caplog.at_level(logging.INFO, logger=quant_ops.__name__):
            prepared = quant_ops.prepare_woq(weight, dtype, native_fp16=native_fp16)
        assert isinstance(prepared.layout, DenseLayout)
        want_dtype = dtype if native_fp16 or dtype == torch.float32 else torch.float32
        assert prepared.layout.weight.dtype == want_dtype
        assert f"scalar for {str(dtype).removeprefix('torch.')}" in caplog.text
        _assert_matches("woq_linear", quant_ops.woq_linear(x, prepared, bias),
                        ref_woq(x, weight, bias))


def test_unsupported_groups_fall_back_dense_and_say_so_once(
        caplog: pytest.LogCaptureFixture) -> None:
    x, w, bias = _inputs(4, 256, 48, BF16)
    weight = group_weight(w, 4, 16, False)  # the kernel's smallest group is 32
    with caplog.at_level(logging.INFO, logger=quant_ops.__name__):
        prepared = quant_ops.prepare_woq(weight, BF16)
        out = quant_ops.woq_linear(x, prepared, bias)
        quant_ops.prepare_woq(weight, BF16)  # same shape: no repeat
    _assert_matches("woq_linear", out, ref_woq(x, weight, bias))
    assert isinstance(prepared.layout, DenseLayout)
    [record] = caplog.records
    assert record.levelno == logging.INFO
    assert "4-bit group-16 weight [48, 256]" in record.getMessage()
    assert "not 16" in record.getMessage()
    with caplog.at_level(logging.INFO, logger=quant_ops.__name__):
        quant_ops.prepare_woq(group_weight(w, 8, 32, True), BF16)
    assert "8-bit codes with group scales" in caplog.records[-1].getMessage()


@pytest.mark.parametrize(("n", "k", "group"), [(64, 256, 32), (40, 384, 128), (20, 384, 96),
                                               (48, 768, 384), (130, 512, 256)])
def test_int4_weights_stay_packed(n: int, k: int, group: int) -> None:
    """Packed 4 bits a weight (N padded to 16), any group that is a multiple of 32."""
    x, w, bias = _inputs(3, k, n, BF16)
    weight = group_weight(w, 4, group, symmetric=False)
    prepared = quant_ops.prepare_woq(weight, BF16)
    layout = prepared.layout
    assert isinstance(layout, Int4Layout)
    padded = -(-n // 16) * 16
    assert layout.packed.dtype == torch.uint8
    assert layout.packed.untyped_storage().nbytes() == padded * k // 2
    assert group % layout.group == 0 and layout.group in quant_ops.INT4_GROUPS
    # scales, zeros and the zero residual: a few bytes a group, far from a dense weight
    assert prepared.storage_bytes() <= padded * k // 2 + padded * (k // layout.group) * 8
    assert prepared.storage_bytes() < padded * k  # under 1 byte a weight (dense bf16: 2)
    _assert_matches("woq_linear", quant_ops.woq_linear(x, prepared, bias),
                    ref_woq(x, weight, bias))


def test_zero_rounding_is_put_back_only_where_needed() -> None:
    x, w, _ = _inputs(8, 256, 64, BF16)
    sym = quant_ops.prepare_woq(group_weight(w, 4, 128, True), BF16)
    assert sym.layout.zero_residual is None  # zeros 0: exact in bfloat16
    # Every weight 15 * s + o = 1e-4 (s = 2**-7 is exact in bf16; the kernel's zero o + 8s
    # is not): rounding the zero to bf16 alone would cancel the whole output.
    n, k, s = 16, 256, 2.0**-7
    codes = torch.full((n, k), 15, dtype=torch.uint8)
    scales = torch.full((n, k // 128), s)
    weight = GroupQuantWeight(codes, scales, -15 * scales + 1e-4, bits=4)
    prepared = quant_ops.prepare_woq(weight, BF16)
    assert prepared.layout.zero_residual is not None
    ones = torch.ones(1, k, dtype=BF16)
    want = ref_woq(ones, weight).float()
    assert torch.allclose(want, torch.full_like(want, k * 1e-4), rtol=1e-2)
    got = quant_ops.woq_linear(ones, prepared).float()
    assert torch.allclose(got, want, rtol=1e-2)
    prepared.layout.zero_residual = None
    assert not torch.allclose(quant_ops.woq_linear(ones, prepared).float(), want, rtol=0.5)


def test_int8_weight_is_not_copied_where_int_mm_is_exact() -> None:
    x, w, bias = _inputs(3, 256, 48, torch.float32)
    weight = int8_weight(w)
    prepared = quant_ops.prepare_int8(weight, torch.float32)
    _assert_matches("int8_linear", quant_ops.int8_linear(x, prepared, bias),
                    ref_int8(x, weight, bias))
    if not quant_ops.int_mm_exact():
        assert isinstance(prepared.layout, DenseLayout)
        return
    assert isinstance(prepared.layout, Int8Layout)
    assert prepared.layout.weight_t.dtype == torch.int8
    assert prepared.layout.weight_t.data_ptr() == weight.weight.data_ptr()
    assert prepared.storage_bytes() == 48 * 256 + 48 * 4


@pytest.mark.parametrize("dtype", [torch.float32, BF16, torch.float16], ids=str)
def test_int8_runs_dense_where_int_mm_is_not_exact(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        dtype: torch.dtype) -> None:
    monkeypatch.setattr(quant_ops, "int_mm_exact", lambda: False)
    x, w, bias = _inputs(5, 384, 40, dtype)
    weight = int8_weight(w)
    for static in (None, x.float().abs().amax() / 127 * 1.5):
        case = type(weight)(weight.weight, weight.scale, static)
        with caplog.at_level(logging.INFO, logger=quant_ops.__name__):
            prepared = quant_ops.prepare_int8(case, dtype, native_bf16=True, native_fp16=True)
            got = quant_ops.int8_linear(x, prepared, bias)
        assert isinstance(prepared.layout, DenseLayout)
        assert prepared.layout.weight.dtype == dtype
        _assert_matches("int8_linear", got, ref_int8(x, case, bias))
    assert "no VNNI" in caplog.text


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="oneDNN x86 ISAs")
def test_int_mm_probe_agrees_with_onednns_avx2_int8_kernels() -> None:
    """oneDNN held to AVX2 (as on a Zen 3) may sum int8 products in saturating int16
    (vpmaddubsw), or exactly, by version and CPU: the probe must say which this one does,
    and the provider match the reference either way."""
    script = textwrap.dedent("""
        import torch
        from pagoda.testing import check_op
        from pagoda_cpu import quant_ops
        # Products that saturate int16 pairs however oneDNN shifts the activations.
        exact = True
        for m in (1, 2, 40):
            for av, bv in ((127, 127), (-128, 127), (127, -127), (-128, -127)):
                a = torch.full((m, 128), av, dtype=torch.int8)
                b = torch.full((16, 128), bv, dtype=torch.int8)
                exact &= torch.equal(torch._int_mm(a, b.t()).long(), a.long() @ b.long().t())
        print("exact", quant_ops.int_mm_exact(), exact)
        for dtype in (torch.float32, torch.bfloat16):
            report = check_op("int8_linear", quant_ops.int8_linear, dtype,
                              prepare=quant_ops.prepare_int8)
            report.raise_for_failures()
            print("checked", len(report.checked), len(report.skipped))
    """)
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX2"}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.split("\n")
    _, probe, truth = lines[0].split()
    assert probe == truth
    assert lines[1].startswith("checked ") and lines[1].endswith(" 0")


def test_a_prepared_weight_serves_another_activation_dtype() -> None:
    """Prepared for bfloat16, called with float32 (and a float32 dense weight with
    bfloat16): the layout as built, cast for the call, still means the same."""
    x, w, bias = _inputs(2, 256, 32, BF16)
    i4 = group_weight(w, 4, 64, True)
    prepared = quant_ops.prepare_woq(i4, BF16)
    assert isinstance(prepared.layout, Int4Layout)
    got = quant_ops.woq_linear(x.float(), prepared, bias.float())
    assert got.dtype == torch.float32
    _assert_matches("woq_linear", got.to(BF16), ref_woq(x, i4, bias))
    dense = quant_ops.prepare_fp8(fp8_weight(w), torch.float32)
    got = quant_ops.fp8_linear(x, dense, bias)  # a float32 weight serves bf16 exactly
    _assert_matches("fp8_linear", got, ref_fp8(x, fp8_weight(w), bias))
