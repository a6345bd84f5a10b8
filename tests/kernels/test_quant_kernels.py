"""The quantized-linear kernels (`pagoda.kernels.triton.quant_linear`) match core's references
(`pagoda.ops.quant_reference`): on the conformance kit's cases through each op's `prepare`,
on every path of every kernel (register and tl.dot gemv, K splits, fused, static and
pre-quantized activations, blocked scales, odd shapes), with activation rounding identical
to the references' bit for bit. Mutants (a dropped offset, a wrong scale group, another
code order) fail the same checks, so the checks can fail. On a GPU (ci/gpu.sh) the same
run natively, plus the registered CUDA providers, torch._scaled_mm / torch._int_mm paths,
8B-sized decode shapes and CUDA-graph replays."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
import torch

pytest.importorskip("triton")

from pagoda.kernels.triton import quant_linear as ql  # noqa: E402
from pagoda.kernels.triton.common import GemvTiles  # noqa: E402
from pagoda.kernels.triton.quant_prims import (  # noqa: E402
    ONE_PASS_MAX,
    pack_codes,
    quantize_activations,
)
from pagoda.kernels.triton.row_gemv import fp8_row_gemv  # noqa: E402
from pagoda.kernels.triton.scaled_gemm import QGemmPlan, QGemvPlan, qgemm, qgemv  # noqa: E402
from pagoda.kernels.triton.woq_dot import woq_dot, woq_dot_supports  # noqa: E402
from pagoda.kernels.triton.woq_gemm import (  # noqa: E402
    PackedGroupWeight,
    WoqGemmPlan,
    woq_gemm,
    woq_gemv,
)
from pagoda.ops import quant_reference as ref  # noqa: E402
from pagoda.quant.rtn import fp8_weight, group_weight, int8_weight  # noqa: E402
from pagoda.quant.tensors import (  # noqa: E402
    FP8_MAX,
    INT8_MAX,
    per_token_scale,
    quantize_fp8,
    quantize_int8,
    round_activations,
)
from pagoda.testing import DTYPES, check_op, dtype_name  # noqa: E402
from pagoda.testing.tolerances import mismatch, op_tolerance  # noqa: E402

OPS: dict[str, tuple[Callable[..., Any], Callable[[Any], Any]]] = {
    "fp8_linear": (ql.fp8_linear, ql.prepare_fp8),
    "int8_linear": (ql.int8_linear, ql.prepare_int8),
    "woq_linear": (ql.woq_linear, ql.prepare_woq),
}
on_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _close(op: str, got: torch.Tensor, want: torch.Tensor) -> None:
    problem = mismatch("output", got, want, op_tolerance(op, want.dtype))
    assert problem is None, problem


def _operands(seed: int, m: int, n: int, k: int, dtype: torch.dtype = torch.bfloat16
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x [m, k] (entries of order 2), a dense W [n, k] (outputs of order 2), bias [n]."""
    gen = torch.Generator().manual_seed(seed)
    return ((torch.randn(m, k, generator=gen) * 2).to(dtype),
            torch.randn(n, k, generator=gen) * k**-0.5,
            (torch.randn(n, generator=gen) * 0.1).to(dtype))


def _on(weight: Any, device: str) -> Any:
    return dataclasses.replace(weight, **{
        f.name: getattr(weight, f.name).to(device) for f in dataclasses.fields(weight)
        if isinstance(getattr(weight, f.name), torch.Tensor)})


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
@pytest.mark.parametrize("op", OPS)
def test_kernels_match_reference(op: str, dtype: torch.dtype, device: str) -> None:
    impl, prepare = OPS[op]
    report = check_op(op, impl, dtype, device=device, seed=5, prepare=prepare)
    report.raise_for_failures()
    assert report.checked and not report.skipped


def test_activation_rounding_is_the_references(device: str) -> None:
    """Codes and scales bit for bit, ties included (to even), per token, per group and by
    a static scale; float8 values that round up into the next binade too."""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(4, 200, generator=gen) * 3
    # row 0: amax 127 (int8 scale 1): halves; row 1: amax 448 (fp8 scale 1): e4m3 ties
    x[0, :8] = torch.tensor([127.0, 0.5, 1.5, 2.5, -0.5, -2.5, 3.5, -126.5])
    x[1, :8] = torch.tensor([448.0, 17.0, 19.0, 126.5, -31.69, 2.0**-10, 3 * 2.0**-10, -250.0])
    x[3] = 0.0
    for static in (None, torch.tensor(0.02)):
        for int8, qmax in ((True, INT8_MAX), (False, FP8_MAX)):
            scale = static.reshape(1, 1) if static is not None else per_token_scale(x, qmax)
            want = quantize_int8(x, scale) if int8 else quantize_fp8(x, scale)
            q, s = quantize_activations(x.to(device), int8, static.to(device)
                                        if static is not None else None)
            assert torch.equal(q.cpu().view(torch.uint8), want.view(torch.uint8))
            assert torch.equal(s.cpu(), scale.expand(4, 1))
    scale = per_token_scale(x, FP8_MAX, 64)
    q, s = quantize_activations(x.to(device), False, None, 64)
    assert torch.equal(s.cpu(), scale)
    assert torch.equal(q.cpu().view(torch.uint8), quantize_fp8(x, scale, 64).view(torch.uint8))
    # Rows longer than one load (`ONE_PASS_MAX`) take two passes. (Values, not bytes: the
    # interpreter's float8 cast drops the sign of a negative that rounds to zero.)
    x = torch.randn(2, ONE_PASS_MAX + 40, generator=gen) * 3
    x[1, -1] = -500.0
    for int8, qmax in ((True, INT8_MAX), (False, FP8_MAX)):
        scale = per_token_scale(x, qmax)
        want = quantize_int8(x, scale) if int8 else quantize_fp8(x, scale)
        q, s = quantize_activations(x.to(device), int8)
        assert torch.equal(s.cpu(), scale)
        assert torch.equal(q.cpu().float(), want.float())


def test_int8_blocks_round_alike_on_the_device(device: str) -> None:
    """`round_activations` (gguf_a8's blocks) on the device gives the host's values bit for
    bit: 16-bit activations put ~4e-4 of x / d exactly on a half, where a scale an ulp off
    (CUDA divides by a Python number as a multiply by its reciprocal) would round the other
    way."""
    gen = torch.Generator().manual_seed(4)
    x = (torch.randn(64, 4096, generator=gen) * 2).half().float()
    x[0, :32] = torch.arange(32) - 15.5
    want = round_activations(x, 32)
    assert torch.equal(round_activations(x.to(device), 32).cpu(), want)


def test_codes_pack_in_bit_reversed_order() -> None:
    """Code f of a word sits in field bitrev(f): the order the kernels' joins unpack."""
    codes = torch.arange(16, dtype=torch.uint8).repeat(2, 1)  # [2, 16]: two words a row
    words = pack_codes(codes, 4)
    field = [(int(words[0, 0]) >> (4 * i)) & 15 for i in range(8)]
    assert field == [0, 4, 2, 6, 1, 5, 3, 7]
    bytes_ = pack_codes(torch.tensor([[1, 2, 3, 250]], dtype=torch.uint8), 8)
    assert [(int(bytes_[0, 0]) >> (8 * i)) & 255 for i in range(4)] == [1, 3, 2, 250]


# (kind, weight block or None): the K tile of a blocked weight is its bk
SCALED_KINDS = ("fp8", "fp8 static", "fp8 prequant", "fp8 block", "fp8 block static",
                "int8", "int8 static", "int8 prequant")
GEMV_PLANS = (QGemvPlan(8, 64, False), QGemvPlan(4, 64, False, num_splits=3),
              QGemvPlan(16, 64, True), QGemvPlan(32, 64, True, num_splits=2))


def _scaled_case(kind: str, m: int, n: int, k: int, bk: int, seed: int,
                 dtype: torch.dtype = torch.bfloat16) -> tuple[Any, ...]:
    x, w, b = _operands(seed, m, n, k, dtype)
    int8 = kind.startswith("int8")
    weight = int8_weight(w) if int8 else fp8_weight(w, (16, bk) if "block" in kind else None)
    if "static" in kind:
        static = x.float().abs().amax() / (INT8_MAX if int8 else FP8_MAX) * 1.5
        weight = dataclasses.replace(weight, input_scale=static)
    want = (ref.int8_linear if int8 else ref.fp8_linear)(x, weight, b)
    return x, weight, b, want, "int8_linear" if int8 else "fp8_linear"


@pytest.mark.parametrize("plan", GEMV_PLANS, ids=lambda p: p.label)
@pytest.mark.parametrize("kind", SCALED_KINDS)
@pytest.mark.parametrize("rows", [1, 5])
def test_every_gemv_path(plan: QGemvPlan, kind: str, rows: int, device: str) -> None:
    """N = 37 leaves a partial column tile, K = 200 a partial K tile (and K block)."""
    x, weight, b, want, op = _scaled_case(kind, rows, 37, 200, plan.block_k, rows)
    w = _on((ql.prepare_int8 if op == "int8_linear" else ql.prepare_fp8)(weight), device)
    xd, out = x.to(device), torch.empty(want.shape, dtype=x.dtype, device=device)
    if "prequant" in kind:
        xq, xs = quantize_activations(xd, op == "int8_linear")
        qgemv(out, xq, xs, w.weight, w.scale, b.to(device), x_mode=2, plan=plan)
    else:
        qgemv(out, xd, w.input_scale, w.weight, w.scale, b.to(device),
              x_mode=1 if "static" in kind else 0, block=w.block, plan=plan)
    _close(op, out, want)


ROW_PLANS = (GemvTiles(16, 256), GemvTiles(8, 64, num_splits=3), GemvTiles(32, 16))


@pytest.mark.parametrize("plan", ROW_PLANS, ids=lambda p: p.label)
@pytest.mark.parametrize("kind", ["fp8", "fp8 static"])
def test_every_fp8_row_path(plan: GemvTiles, kind: str, device: str) -> None:
    """One row, N = 37, K = 200 (partial tiles); the weight's codes include zeros of both
    signs, subnormals and the largest values, which the kernel builds from bits."""
    x, weight, b, want, op = _scaled_case(kind, 1, 37, 200, 16, 7)
    codes = weight.weight.clone()
    special = torch.tensor([0.0, -0.0, 2.0**-9, -(2.0**-9), 7 * 2.0**-9, 2.0**-6, 448.0,
                            -448.0])
    codes[0, :8] = special.to(codes.dtype)
    weight = dataclasses.replace(weight, weight=codes)
    want = ref.fp8_linear(x, weight, b)
    w = _on(ql.prepare_fp8(weight), device)
    for bias, expected in ((b, want), (None, ref.fp8_linear(x, weight))):
        out = torch.empty(want.shape, dtype=x.dtype, device=device)
        fp8_row_gemv(out, x.to(device), w.input_scale, w.weight, w.scale,
                     bias.to(device) if bias is not None else None, plan)
        _close(op, out, expected)


def test_fp8_rows_of_partial_words_take_the_general_gemv(device: str) -> None:
    """K = 202 is not whole 4-byte words: one row still matches, through `qgemv`."""
    x, weight, b, want, op = _scaled_case("fp8", 1, 9, 202, 16, 8)
    _close(op, ql.fp8_linear(x.to(device), _on(ql.prepare_fp8(weight), device), b.to(device)),
           want)


GEMM_PLANS = (QGemmPlan(16, 32, 64), QGemmPlan(32, 16, 64, num_warps=2))


@pytest.mark.parametrize("plan", GEMM_PLANS, ids=lambda p: f"m{p.block_m} n{p.block_n}")
@pytest.mark.parametrize("kind", [k for k in SCALED_KINDS if "prequant" not in k])
def test_every_gemm_path(plan: QGemmPlan, kind: str, device: str) -> None:
    x, weight, b, want, op = _scaled_case(kind, 35, 37, 200, plan.block_k, 2, torch.float16)
    w = _on((ql.prepare_int8 if op == "int8_linear" else ql.prepare_fp8)(weight), device)
    xq, xs = quantize_activations(x.to(device), op == "int8_linear", w.input_scale,
                                  w.block[1] if w.block else None)
    out = torch.empty(want.shape, dtype=x.dtype, device=device)
    _close(op, qgemm(out, xq, xs, w.weight, w.scale, b.to(device), block=w.block, plan=plan),
           want)


WOQ_FORMATS = ((4, 32, False), (4, 64, True), (4, 128, False), (8, 32, True))


@pytest.mark.parametrize("fmt", WOQ_FORMATS, ids=lambda f: f"int{f[0]} g{f[1]}")
@pytest.mark.parametrize("rows", [1, 3, 8])
def test_every_woq_path(fmt: tuple[int, int, bool], rows: int, device: str) -> None:
    """K = 384: three groups of 128 (a K tile of 256 is half empty at the end); N = 37."""
    bits, group, symmetric = fmt
    x, w, b = _operands(rows, rows, 37, 384, torch.float16)
    weight = group_weight(w, bits, group, symmetric)
    want = ref.woq_linear(x, weight, b)
    packed = _on(ql.prepare_woq(weight), device)
    xd, bd = x.to(device), b.to(device)
    for plan in (GemvTiles(8, 256), GemvTiles(4, max(group, 64), num_splits=2)):
        _close("woq_linear", woq_gemv(torch.empty_like(want, device=device), xd, packed, bd,
                                      plan), want)
    for bias in (None, bd):
        plan = WoqGemmPlan(16, 32, max(group, 64))
        got = woq_gemm(torch.empty_like(want, device=device), xd, packed, bias, plan)
        _close("woq_linear", got, ref.woq_linear(x, weight, b if bias is not None else None))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=dtype_name)
@pytest.mark.parametrize("group", [32, 128])
@pytest.mark.parametrize("rows", [1, 5, 16])
def test_every_woq_dot_path(dtype: torch.dtype, group: int, rows: int, device: str) -> None:
    """The tensor-core kernel of 4-bit codes: N = 37 (a partial row tile), K = 384 (a step
    of 3 groups of 128 covers K once, one of 2 has a group past the end), with and without
    bias, asymmetric and symmetric codes (offsets of either sign)."""
    x, w, b = _operands(rows + group, rows, 37, 384, dtype)
    for symmetric in (False, True):
        weight = group_weight(w, 4, group, symmetric)
        packed = _on(ql.prepare_woq(weight), device)
        assert woq_dot_supports(x.to(device), packed)
        plans = (GemvTiles(16, group), GemvTiles(32, 2 * group, num_splits=2),
                 GemvTiles(64, 3 * group))
        for plan, bias in zip(plans, (b, None, b), strict=True):
            got = woq_dot(torch.empty(rows, 37, dtype=dtype, device=device), x.to(device),
                          packed, bias if bias is None else bias.to(device), plan)
            _close("woq_linear", got, ref.woq_linear(x, weight, bias))


def test_woq_dot_takes_what_its_sums_are_exact_for() -> None:
    """4-bit codes (a 16-bit float holds M + code exactly), 16-bit x, up to 16 rows."""
    w = _on(ql.prepare_woq(group_weight(torch.randn(16, 64), 4, 32)), "cpu")
    x = torch.randn(16, 64, dtype=torch.bfloat16)
    assert woq_dot_supports(x, w)
    assert not woq_dot_supports(x.float(), w)
    assert not woq_dot_supports(torch.cat([x, x[:1]]), w)
    assert not woq_dot_supports(x, ql.prepare_woq(group_weight(torch.randn(16, 64), 8, 32)))


def test_batched_strided_and_empty_inputs(device: str) -> None:
    x, w, b = _operands(4, 6, 40, 128)
    weight = fp8_weight(w)
    prepared = _on(ql.prepare_fp8(weight), device)
    for xv in (x[:, :128].reshape(2, 3, 128), x[0], torch.cat([x, x], 1)[:, 64:192]):
        got = ql.fp8_linear(xv.to(device), prepared, b.to(device))
        assert got.shape == (*xv.shape[:-1], 40)
        _close("fp8_linear", got, ref.fp8_linear(xv, weight, b))
    assert ql.fp8_linear(x[:0].to(device), prepared).shape == (0, 40)


# Mutants: each prepares the weight wrongly in one way; conformance must catch it.
def _no_offsets(weight: Any, dtype: Any = None) -> PackedGroupWeight:
    packed = ql.prepare_woq(weight)
    return dataclasses.replace(packed, offsets=torch.zeros_like(packed.offsets))


def _scales_of_the_next_group(weight: Any, dtype: Any = None) -> PackedGroupWeight:
    packed = ql.prepare_woq(weight)
    return dataclasses.replace(packed, scales=packed.scales.roll(1, dims=1),
                               offsets=packed.offsets.roll(1, dims=1))


def _codes_in_natural_order(weight: Any, dtype: Any = None) -> PackedGroupWeight:
    packed = ql.prepare_woq(weight)
    per_word = 32 // weight.bits
    fields = weight.codes.reshape(weight.codes.shape[0], -1, per_word).to(torch.int64)
    words = sum(fields[:, :, f] << (weight.bits * f) for f in range(per_word))
    words = torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)
    return dataclasses.replace(packed, words=words)


def _fp8_blocks_of_the_next_k(weight: Any, dtype: Any = None) -> ql.ScaledWeight:
    prepared = ql.prepare_fp8(weight)
    return dataclasses.replace(prepared, scale=prepared.scale.roll(1, dims=-1))


def _int8_scales_of_the_next_row(weight: Any, dtype: Any = None) -> ql.ScaledWeight:
    prepared = ql.prepare_int8(weight)
    return dataclasses.replace(prepared, scale=prepared.scale.roll(1))


MUTANTS = {
    "woq ignores offsets": ("woq_linear", _no_offsets),
    "woq scales of another group": ("woq_linear", _scales_of_the_next_group),
    "woq codes in another order": ("woq_linear", _codes_in_natural_order),
    "fp8 block scales of another K block": ("fp8_linear", _fp8_blocks_of_the_next_k),
    "int8 scales of another row": ("int8_linear", _int8_scales_of_the_next_row),
}


def _few_cases(in_features: int, out_features: int, **static: Any) -> str | None:
    """The cases of up to 256 inputs and 48 outputs with blocks or 32-input groups, so that
    the mutants stay quick in the interpreter."""
    small = in_features <= 256 and out_features <= 48
    relevant = static.get("group_size") in (None, 32) and static.get("block", 1) is not None
    return None if small and relevant else "left out of the mutant check (time)"


@pytest.mark.parametrize("mutant", MUTANTS)
def test_mutants_fail_conformance(mutant: str, device: str) -> None:
    op, prepare = MUTANTS[mutant]
    report = check_op(op, OPS[op][0], torch.float16, device=device, seed=5, prepare=prepare,
                      unusable=_few_cases)
    assert report.failures, f"{mutant}: every case passed"
    assert "elements beyond" in report.failures[0]


# On an NVIDIA GPU only (ci/gpu.sh): what the CPU interpreter cannot run.

@pytest.mark.cuda
@on_gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
def test_registered_cuda_providers(dtype: torch.dtype) -> None:
    from pagoda.testing import check_kernel_provider, kernel_providers

    entries = [e for e in kernel_providers("cuda") if e.op in OPS and e.plugin == "cuda"]
    assert sorted({e.op for e in entries}) == sorted(OPS)
    for entry in entries:
        report = check_kernel_provider(entry.provider, dtype, plugin=entry.plugin,
                                       device="cuda", seed=43)
        report.raise_for_failures()
        assert report.checked and not report.skipped


@pytest.mark.cuda
@on_gpu
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("rows", [1, 4, 12, 64, 300])
def test_torch_matmul_paths_and_8b_shapes(op: str, rows: int) -> None:
    """Rows on every path (fused gemv, pre-quantized gemv, _scaled_mm, the
    gemms) at a Llama-3-8B shape (4096 -> 6144, 14336 -> 4096 for one row)."""
    for n, k in ((6144, 4096),) + (((4096, 14336),) if rows == 1 else ()):
        x, w, b = _operands(rows, rows, n, k)
        variants: list[Any] = ([fp8_weight(w), fp8_weight(w, (128, 128))] if op == "fp8_linear"
                               else [int8_weight(w)] if op == "int8_linear"
                               else [group_weight(w, 4, 128), group_weight(w, 8, 32)])
        impl, prepare = OPS[op]
        for weight in variants:
            got = impl(x.cuda(), prepare(_on(weight, "cuda")), b.cuda())
            _close(op, got, getattr(ref, op)(x, weight, b))


@pytest.mark.cuda
@on_gpu
@pytest.mark.parametrize("op", OPS)
def test_decode_replays_from_a_cuda_graph(op: str) -> None:
    x, w, b = (t.cuda() for t in _operands(9, 1, 4096, 4096))
    weight = {"fp8_linear": fp8_weight, "int8_linear": int8_weight,
              "woq_linear": group_weight}[op](w)
    impl, prepare = OPS[op]
    prepared = prepare(weight)
    impl(x, prepared, b)  # compiles outside the graph
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = impl(x, prepared, b)
    x.copy_(_operands(10, 1, 4096, 4096)[0].cuda())
    graph.replay()
    torch.cuda.synchronize()
    _close(op, out, getattr(ref, op)(x.cpu(), _on(weight, "cpu"), b.cpu()))
