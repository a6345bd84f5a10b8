"""pagoda-cuda's CUDA C++ kernels (`platforms/cuda/csrc`, `pagoda_cuda.native`): the library
as built by the package, and on an NVIDIA GPU the 4-bit tensor-core linear against core's
reference, through the provider's choice of kernel and through a CUDA graph."""

from __future__ import annotations

import dataclasses
import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

pytest.importorskip("pagoda_cuda", reason="pagoda-cuda is not installed")

from pagoda.ops import OpTable  # noqa: E402
from pagoda.ops.quant_reference import woq_linear as reference  # noqa: E402
from pagoda.quant.rtn import group_weight  # noqa: E402
from pagoda.quant.tensors import GroupQuantWeight  # noqa: E402
from pagoda.testing.tolerances import mismatch, op_tolerance  # noqa: E402
from pagoda_cuda import native  # noqa: E402
from pagoda_cuda.woq_ops import WIDE_MAX_ROWS, block_warps  # noqa: E402

CSRC = Path(__file__).parents[3] / "platforms" / "cuda" / "csrc"
gpu = pytest.mark.skipif(not torch.cuda.is_available() or native.unavailable() is not None,
                         reason="needs an NVIDIA GPU (compute capability 8.0+) and pagoda-cuda "
                                "built with nvcc (run ci/gpu.sh on a GPU machine)")
gpu_fp8 = pytest.mark.skipif(not torch.cuda.is_available() or native.unavailable((8, 9)),
                             reason="needs an NVIDIA GPU of compute capability 8.9+ and "
                                    "pagoda-cuda built with nvcc")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_sources_compile_for_every_listed_architecture(tmp_path: Path) -> None:
    """What setup.py builds, built again here (no GPU needed): a failure names the line."""
    spec = importlib.util.spec_from_file_location("pagoda_cuda_setup", CSRC.parent / "setup.py")
    cuda_setup = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cuda_setup)  # its flags; setup() runs only as __main__
    lib = tmp_path / "kernels.so"
    subprocess.run([shutil.which("nvcc"), *cuda_setup.FLAGS, *cuda_setup.arch_flags("80;90"),
                    *(str(CSRC.parent / s) for s in cuda_setup.SOURCES), "-o", str(lib)],
                   check=True, capture_output=True, text=True)
    assert lib.stat().st_size > 0


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_the_read_roofline_tool_compiles(tmp_path: Path) -> None:
    """ci/read_roofline.cu (`bash ci/gpu.sh roofline`) builds, so a GPU call never finds it
    broken."""
    tool = tmp_path / "read_roofline"
    subprocess.run([shutil.which("nvcc"), "-O3", "-std=c++17", "-arch=sm_90",
                    str(CSRC.parents[2] / "ci" / "read_roofline.cu"), "-o", str(tool)],
                   check=True, capture_output=True, text=True)
    assert tool.stat().st_size > 0


@pytest.mark.skipif(native.library_path() is None, reason="pagoda-cuda was built without nvcc")
def test_the_installed_library_loads_and_reports_why_it_cannot_run() -> None:
    assert not isinstance(native._library(), str)
    if not torch.cuda.is_available():
        assert native.unavailable() == "no CUDA device is visible to torch"


@pytest.mark.skipif(native.library_path() is None, reason="pagoda-cuda was built without nvcc")
def test_a_library_built_from_other_sources_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stale library (launchers of another signature version) is never called with
    arguments laid out for this one: `_library` says why and that it needs a rebuild."""
    assert native._library().pagoda_cuda_abi_version() == native.ABI_VERSION
    monkeypatch.setattr(native, "ABI_VERSION", native.ABI_VERSION + 1)
    native._library.cache_clear()
    try:
        reason = native._library()
        assert isinstance(reason, str)
        assert "rebuild" in reason and f"this pagoda-cuda's is {native.ABI_VERSION}" in reason
    finally:
        native._library.cache_clear()


@pytest.mark.skipif(native.library_path() is None, reason="pagoda-cuda was built without nvcc")
def test_launchers_refuse_what_their_kernels_do_not_take() -> None:
    """Checked before any CUDA call, so this runs without a GPU; the codes' messages."""
    lib = native._library()
    woq = dict(m=1, n=32, k=256, group_shift=7, warps=8)
    for bad in ({"m": 0}, {"m": 17}, {"n": 40}, {"k": 192}, {"k": 0}, {"group_shift": 4},
                {"group_shift": 9}, {"warps": 6}, {"warps": 16, "m": 9}):
        a = woq | bad
        code = lib.pagoda_woq4_mma(0, None, None, None, None, None, None, a["m"], a["n"],
                                   a["k"], 0, 0, 0, 0, a["group_shift"], a["warps"], 0, 0,
                                   None)
        assert code == 1001, bad
    row = dict(input=2, n=32, k=256, group_shift=7, warps=8)
    for bad in ({"input": 0}, {"input": 3}, {"k": 16384 + 128}, {"n": 40}, {"warps": 6}):
        a = row | bad
        code = lib.pagoda_woq4_mma_row(0, a["input"], None, None, None, None, None, 1e-6, None,
                                       None, None, None, a["n"], a["k"], 0, 0,
                                       a["group_shift"], a["warps"], 0, 0, None)
        assert code == 1001, bad
    fp8 = dict(input=0, n=32, k=256, stride=256, splits=1, tiles=1)
    for bad in ({"n": 40}, {"n": 0}, {"k": 96}, {"k": 16384 + 64, "stride": 16448},
                {"stride": 264}, {"splits": 0}, {"splits": 2},  # 2: with no scratch
                {"input": 3}, {"input": -1}, {"tiles": 0}, {"tiles": 4}, {"n": 48, "tiles": 2}):
        a = fp8 | bad
        code = lib.pagoda_fp8_row(0, a["input"], None, None, None, None, None, 1e-6, None,
                                  None, None, None, a["n"], a["k"], a["stride"], a["splits"],
                                  None, a["tiles"], 0, 0, None)
        assert code == 1001, bad
    assert lib.pagoda_cuda_error_string(1001) == b"unsupported shape or launch"
    assert lib.pagoda_cuda_error_string(1002) == b"unsupported dtype"
    assert lib.pagoda_cuda_error_string(100) == b"no CUDA-capable device is detected"


def test_blocks_take_16_warps_where_their_matmul_has_few() -> None:
    """Llama-3-8B's shapes on an H100's 132 multiprocessors: o and down (256 blocks of 16
    rows) split K 16 ways, qkv (384) and gate_up (1792) 8; more rows than one column tile
    always 8, as the kernel takes 16 warps only for up to 8."""
    sms = 132
    assert block_warps(1, 4096, sms) == block_warps(8, 4096, sms) == 16
    assert block_warps(1, 2 * 16 * sms, sms) == 16
    assert block_warps(1, 2 * 16 * sms + 16, sms) == 8
    assert block_warps(1, 6144, sms) == block_warps(1, 28672, sms) == 8
    assert block_warps(9, 4096, sms) == block_warps(16, 4096, sms) == 8


def test_dependent_launch_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """PAGODA_CUDA_DEPENDENT_LAUNCH: by default every family but the Triton matmuls, every
    family with 1, none with 0, or the families it lists; anything else is refused, naming
    the variable and the families."""
    monkeypatch.delenv(native.DEPENDENT_LAUNCH_ENV, raising=False)
    assert native.dependent_launch_wanted() == {"attention", "reduce", "elementwise", "native"}
    every = {"attention", "reduce", "elementwise", "gemv", "native"}
    for mode, wanted in (("0", set()), ("1", every), ("gemv, native", {"gemv", "native"}),
                         ("elementwise", {"elementwise"})):
        monkeypatch.setenv(native.DEPENDENT_LAUNCH_ENV, mode)
        assert native.dependent_launch_wanted() == wanted
    for mode in ("yes", "gemv,matmul"):
        monkeypatch.setenv(native.DEPENDENT_LAUNCH_ENV, mode)
        with pytest.raises(ValueError, match=f"PAGODA_CUDA_DEPENDENT_LAUNCH={mode!r}.*gemv"):
            native.dependent_launch_wanted()


def test_fp8_provider_serves_unless_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """The FP8 kernel serves by default where the library runs on sm_89 or later, and not
    with PAGODA_CUDA_NATIVE_FP8=0; which matmuls it takes from Triton (`prefers`): on an
    H100's 132 multiprocessors the 8B shape's qkv and o, not gate_up (1792 tiles of 16
    outputs) or down (K = 14336)."""
    from pagoda_cuda import fp8_ops

    monkeypatch.delenv(fp8_ops.ENABLE_ENV, raising=False)
    assert fp8_ops.unavailable() == native.unavailable((8, 9))
    monkeypatch.setenv(fp8_ops.ENABLE_ENV, "0")
    assert f"{fp8_ops.ENABLE_ENV}=0" in fp8_ops.unavailable()
    sms = 132
    assert fp8_ops.prefers(6144, 4096, sms) and fp8_ops.prefers(4096, 4096, sms)
    assert not fp8_ops.prefers(28672, 4096, sms) and not fp8_ops.prefers(4096, 14336, sms)
    assert fp8_ops.plan(6144, 4096, sms) == fp8_ops.Fp8Plan(tiles=2)
    assert fp8_ops.plan(4096, 4096, sms) == fp8_ops.Fp8Plan(tiles=1)
    assert fp8_ops.plan(4096, 14336, sms) == fp8_ops.Fp8Plan(tiles=1, splits=4)
    assert fp8_ops.plan(6160, 4096, sms).tiles == 1  # 385 tiles: not in pairs


def test_fp8_provider_hands_triton_what_the_kernel_does_not_take() -> None:
    """`fp8_ops.fits`, on CPU tensors: one row, 16-bit x, unblocked e4m3 codes with row
    scales, N % 16, K % 64 up to 16384, aligned rows."""
    from pagoda.quant.rtn import fp8_weight
    from pagoda_cuda.fp8_ops import fits, prepare_fp8

    bf16 = torch.bfloat16
    w = prepare_fp8(fp8_weight(torch.randn(48, 256)))
    x = torch.randn(1, 256).to(bf16)
    assert fits(x, w, None) and fits(x, w, torch.zeros(48, dtype=bf16))
    assert not fits(torch.randn(2, 256).to(bf16), w, None)  # rows
    assert not fits(x.float(), w, None)  # a float32 model
    assert not fits(x, w, torch.zeros(48))  # bias type
    assert not fits(torch.randn(1, 260).to(bf16)[:, 4:], w, None)  # misaligned x
    assert not fits(x, prepare_fp8(fp8_weight(torch.randn(40, 256))), None)  # N % 16
    assert not fits(torch.randn(1, 288).to(bf16), prepare_fp8(fp8_weight(torch.randn(48, 288))),
                    None)  # K % 64
    assert not fits(x, prepare_fp8(fp8_weight(torch.randn(48, 256), block=(16, 128))), None)


def test_provider_hands_triton_what_the_kernel_does_not_take() -> None:
    """`fits`, on CPU tensors (it reads shapes, types, strides and addresses only)."""
    from pagoda_cuda import woq_ops

    bf16 = torch.bfloat16
    gen, canonical = _weight(64, 512, 128, True, bf16, 0)
    w = woq_ops.prepare_woq(canonical, bf16)
    x = torch.randn(4, 512, generator=gen).to(bf16)
    assert w.scales.dtype == torch.float32 and w.zeros.dtype == bf16 and woq_ops.fits(x, w, None)
    assert woq_ops.fits(x[:1], w, torch.zeros(64, dtype=bf16))
    assert not woq_ops.fits(torch.randn(17, 512).to(bf16), w, None)  # rows
    assert not woq_ops.fits(x.float(), woq_ops.prepare_woq(canonical, torch.float32), None)
    assert not woq_ops.fits(x, woq_ops.prepare_woq(canonical), None)  # no model dtype
    assert not woq_ops.fits(x, w, torch.zeros(64))  # bias type
    assert not woq_ops.fits(torch.randn(4, 516).to(bf16)[:, 4:], w, None)  # misaligned rows
    _, narrow = _weight(40, 512, 128, True, bf16, 0)
    assert not woq_ops.fits(x, woq_ops.prepare_woq(narrow, bf16), None)  # N % 16
    _, small_groups = _weight(64, 512, 16, True, bf16, 0)
    assert not woq_ops.fits(x, woq_ops.prepare_woq(small_groups, bf16), None)
    # A minimum offset (GGUF Q4_1) is not a zero point: Triton's
    q4_1 = GroupQuantWeight(canonical.codes, canonical.scales,
                            canonical.offsets + 0.3 * canonical.scales)
    assert not woq_ops.fits(x, woq_ops.prepare_woq(q4_1, bf16), None)
    zero_scale = GroupQuantWeight(canonical.codes, canonical.scales.index_fill(0, torch.tensor([0]), 0.0),
                                  canonical.offsets)
    assert not woq_ops.fits(x, woq_ops.prepare_woq(zero_scale, bf16), None)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_zero_points_are_the_formats(dtype: torch.dtype) -> None:
    """Asymmetric groups (integer zero points z, offsets -z * s): the kernel's zero points
    are those integers, in the model's type, and the scales stay the canonical float32."""
    from pagoda_cuda.woq_ops import prepare_woq

    _, canonical = _weight(64, 1024, 32, False, dtype, 3)
    zeros = (-canonical.offsets / canonical.scales).round()
    assert len(zeros.unique()) >= 5  # the zero points vary
    prepared = prepare_woq(canonical, dtype)
    assert prepared.zeros.dtype == dtype and torch.equal(prepared.zeros.float(), zeros)
    assert torch.equal(prepared.scales, canonical.scales)


def _weight(n: int, k: int, group: int, symmetric: bool, dtype: torch.dtype, seed: int):
    gen = torch.Generator().manual_seed(seed)
    canonical = group_weight(torch.randn(n, k, generator=gen) * k**-0.5, 4, group, symmetric)
    return gen, canonical


def _check(m: int, n: int, k: int, group: int, dtype: torch.dtype, has_bias: bool,
           symmetric: bool = True, seed: int = 0) -> None:
    from pagoda_cuda.woq_ops import fits, prepare_woq, woq4_mma

    gen, canonical = _weight(n, k, group, symmetric, dtype, seed)
    x = (torch.randn(m, k, generator=gen) * 2).to(dtype)
    bias = (torch.randn(n, generator=gen) * 0.1).to(dtype) if has_bias else None
    prepared = prepare_woq(canonical.to("cuda"), dtype)
    xc = x.cuda()
    bc = bias.cuda() if bias is not None else None
    assert fits(xc, prepared, bc)
    want = reference(x.float(), canonical, bias.float() if bias is not None else None)
    for warps in (4, 8, 16) if m <= WIDE_MAX_ROWS else (4, 8):
        out = torch.full((m, n), float("nan"), dtype=dtype, device="cuda")
        woq4_mma(out, xc, prepared, bc, warps)
        problem = mismatch(f"m={m} n={n} k={k} g{group} warps={warps}", out.cpu().float(),
                           want, op_tolerance("woq_linear", dtype))
        assert problem is None, problem


@gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("m", [1, 2, 7, 8, 9, 16])
def test_rows_and_types(m: int, dtype: torch.dtype) -> None:
    _check(m, 256, 1152, 128, dtype, has_bias=m % 2 == 1, seed=m)


@gpu
@pytest.mark.parametrize("group", [32, 64, 128, 256])
@pytest.mark.parametrize("symmetric", [True, False], ids=["sym", "asym"])
def test_groups(group: int, symmetric: bool) -> None:
    _check(3, 48, 1024, group, torch.bfloat16, has_bias=False, symmetric=symmetric, seed=group)


@gpu
@pytest.mark.parametrize("shape", [(6144, 4096), (4096, 14336)], ids=["qkv", "down"])
def test_8b_shapes(shape: tuple[int, int]) -> None:
    n, k = shape
    _check(1, n, k, 128, torch.bfloat16, has_bias=False, seed=n)


@gpu
def test_provider_picks_the_kernel_by_rows_and_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    """woq_linear: the kernel where it fits, Triton elsewhere; both match the reference."""
    from pagoda_cuda import woq_ops

    assert OpTable("cuda", dtype=torch.bfloat16).providers["woq_linear"] == "cuda/cuda_native"
    with monkeypatch.context() as env:
        env.setenv("PAGODA_EXCLUDED_PROVIDERS", "woq_linear/cuda_native")
        assert OpTable("cuda", dtype=torch.bfloat16).providers["woq_linear"] == "cuda/triton"
    rows_seen = []
    kernel = woq_ops.woq4_mma
    monkeypatch.setattr(woq_ops, "woq4_mma",
                        lambda *a, **kw: rows_seen.append(a[1].shape[0]) or kernel(*a, **kw))
    # 1 and 16 rows (x [2, 8, K]) take the kernel; 17 rows and 40 columns go to Triton.
    for lead, n in (((1,), 64), ((2, 8), 64), ((17,), 64), ((4,), 40)):
        gen, canonical = _weight(n, 512, 128, True, torch.bfloat16, n + len(lead))
        x = (torch.randn(*lead, 512, generator=gen) * 2).to(torch.bfloat16)
        prepared = woq_ops.prepare_woq(canonical.to("cuda"), torch.bfloat16)
        got = woq_ops.woq_linear(x.cuda(), prepared)
        assert got.shape == (*lead, n)
        problem = mismatch(f"x{list(lead)} n={n}", got.cpu().float(), reference(x.float(), canonical),
                           op_tolerance("woq_linear", torch.bfloat16))
        assert problem is None, problem
    assert rows_seen == [1, 16]


@gpu
def test_replays_in_a_cuda_graph() -> None:
    from pagoda_cuda.woq_ops import prepare_woq, woq_linear

    gen, canonical = _weight(128, 1024, 64, False, torch.bfloat16, 7)
    prepared = prepare_woq(canonical.to("cuda"), torch.bfloat16)
    x = torch.zeros(4, 1024, dtype=torch.bfloat16, device="cuda")
    bias = torch.randn(128, generator=gen).to(torch.bfloat16).cuda()
    woq_linear(x, prepared, bias)  # warm
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = woq_linear(x, prepared, bias)
    for seed in (1, 2):
        x.copy_(torch.randn(4, 1024, generator=torch.Generator().manual_seed(seed)))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, woq_linear(x, prepared, bias))


@gpu
def test_dependent_launches_wait_for_their_inputs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each launch reads what the kernel just ahead of it wrote: launched dependently
    (PAGODA_CUDA_DEPENDENT_LAUNCH=1, from sm_90 on), eagerly and replayed from a CUDA graph,
    the chain computes exactly what it computes launched one after the other."""
    from pagoda_cuda.woq_ops import prepare_woq, woq4_mma

    _, canonical = _weight(2048, 2048, 128, False, torch.bfloat16, 11)
    prepared = prepare_woq(canonical.to("cuda"), torch.bfloat16)
    x = torch.randn(2, 2048, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    x = x.cuda()

    def chain() -> torch.Tensor:
        h = x
        for _ in range(12):
            out = torch.empty_like(h)
            h = woq4_mma(out, h, prepared, None) * 0.5 + x
        return h

    def run(mode: str) -> tuple[torch.Tensor, torch.Tensor]:
        monkeypatch.setenv(native.DEPENDENT_LAUNCH_ENV, mode)
        native.dependent_families.cache_clear()  # decided once a process
        eager = chain()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = chain()
        graph.replay()
        torch.cuda.synchronize()
        return eager, out.clone()

    serial = run("0")
    assert torch.equal(serial[0], serial[1])
    dependent = run("1")
    assert native.dependent_launch(0) == (torch.cuda.get_device_capability(0) >= (9, 0))
    native.dependent_families.cache_clear()  # the next test reads the variable as it is
    assert torch.equal(dependent[0], serial[0]) and torch.equal(dependent[1], serial[0])


def _normed_row(k: int, dtype: torch.dtype, residual: bool, seed: int):
    """A RowInput of one normed row (x, a residual where asked, a norm weight near 1) and
    the reference's normed row and residual sum."""
    from pagoda.kernels.triton.row_input import RowInput

    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(1, k, generator=gen) * 3).to(dtype)
    r = (torch.randn(1, k, generator=gen)).to(dtype) if residual else None
    weight = (1 + 0.2 * torch.randn(k, generator=gen)).to(dtype)
    eps = 1e-5
    summed = (x.float() + r.float()).to(dtype) if residual else x
    s = summed.float()
    normed = (s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(dtype)
    row = RowInput.normed(x.cuda(), weight.cuda(), eps, r.cuda() if residual else None)
    return row, normed, summed


@gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("residual", [True, False], ids=["residual", "first"])
@pytest.mark.parametrize("group", [32, 128])
def test_normed_rows(dtype: torch.dtype, residual: bool, group: int) -> None:
    """pagoda_woq4_mma_row: the RMSNorm computed by every block before its products (the
    residual sum stored by the first) gives the reference's norm followed by its linear."""
    from pagoda_cuda.woq_ops import prepare_woq, row_fits, weight_fits, woq4_mma_row

    n, k = 96, 2048
    _, canonical = _weight(n, k, group, False, dtype, group)
    prepared = prepare_woq(canonical.to("cuda"), dtype)
    row, normed, summed = _normed_row(k, dtype, residual, group + residual)
    assert row_fits(row) and weight_fits(prepared, None, dtype)
    want = reference(normed.float(), canonical)
    for warps in (4, 8, 16):
        out = torch.full((1, n), float("nan"), dtype=dtype, device="cuda")
        woq4_mma_row(out, row, prepared, None, warps)
        problem = mismatch(f"g{group} warps={warps}", out.cpu().float(), want,
                           op_tolerance("woq_linear", dtype))
        assert problem is None, problem
        if residual:
            assert torch.equal(row.summed.cpu(), summed)


@gpu
def test_fused_layer_matmul_takes_any_row_input() -> None:
    """The provider's one-row matmul of a fused decode layer (`woq_ops.row_matmul`): a normed
    row on the kernel, a normed row it cannot take (K past its shared memory) and a gated
    row through their ops' kernels first, each as the ops followed by the linear compute it."""
    from pagoda.kernels.triton.row_input import RowInput
    from pagoda.models.decode_fusion import FusableLinear
    from pagoda_cuda import woq_ops

    dtype = torch.bfloat16
    for k, seed in ((1024, 1), (woq_ops.MAX_ROW_INPUTS + 128, 2)):
        _, canonical = _weight(32, k, 128, True, dtype, seed)
        prepared = woq_ops.prepare_woq(canonical.to("cuda"), dtype)
        matmul = woq_ops.row_matmul(FusableLinear(woq_ops.woq_linear, prepared, None))
        assert matmul is not None and not matmul.rotates(64, 64)
        row, normed, summed = _normed_row(k, dtype, True, seed)
        assert woq_ops.row_fits(row) == (k <= woq_ops.MAX_ROW_INPUTS)
        problem = mismatch(f"normed k={k}", matmul(row).cpu().float(),
                           reference(normed.float(), canonical), op_tolerance("woq_linear", dtype))
        assert problem is None, problem
        assert torch.equal(row.summed.cpu(), summed)
    _, canonical = _weight(32, 1024, 128, True, dtype, 3)
    prepared = woq_ops.prepare_woq(canonical.to("cuda"), dtype)
    matmul = woq_ops.row_matmul(FusableLinear(woq_ops.woq_linear, prepared, None))
    gate_up = torch.randn(1, 2048, generator=torch.Generator().manual_seed(4)).to(dtype)
    g, u = gate_up.float().chunk(2, dim=-1)
    gated = (g * torch.sigmoid(g) * u).to(dtype)
    problem = mismatch("gated", matmul(RowInput.gated(gate_up.cuda())).cpu().float(),
                       reference(gated.float(), canonical), op_tolerance("woq_linear", dtype))
    assert problem is None, problem
    # A Triton weight (GGUF Q4_1's minimum offsets) is not the kernel's.
    q4_1 = GroupQuantWeight(canonical.codes, canonical.scales,
                            canonical.offsets + 0.3 * canonical.scales)
    assert woq_ops.row_matmul(FusableLinear(woq_ops.woq_linear,
                                            woq_ops.prepare_woq(q4_1.to("cuda"), dtype),
                                            None)) is None


@gpu_fp8
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("static", [False, True], ids=["per-token", "static"])
@pytest.mark.parametrize("shape", [(48, 1024), (48, 8320), (6144, 4096), (4096, 14336)],
                         ids=["small", "split", "qkv", "down"])
def test_fp8_rows(dtype: torch.dtype, static: bool, shape: tuple[int, int]) -> None:
    """pagoda_fp8_row against the reference's fp8_linear: x quantized per token (or by a
    static scale), the codes and x multiplied exactly, both scales after the sum; K split
    between blocks past fp8_ops.SPLIT_INPUTS (split: 3 splits, the last shorter, and a
    bias; down: 4)."""
    from pagoda.ops.quant_reference import fp8_linear as fp8_reference
    from pagoda.quant.rtn import fp8_weight
    from pagoda_cuda.fp8_ops import fits, fp8_row, prepare_fp8

    n, k = shape
    gen = torch.Generator().manual_seed(n + static)
    canonical = fp8_weight(torch.randn(n, k, generator=gen) * k**-0.5)
    if static:
        canonical = dataclasses.replace(canonical, input_scale=torch.tensor(0.02))
    x = (torch.randn(1, k, generator=gen) * 3).to(dtype)
    bias = (torch.randn(n, generator=gen) * 0.1).to(dtype) if n < 1000 else None
    prepared = prepare_fp8(canonical.to("cuda"))
    xc, bc = x.cuda(), bias.cuda() if bias is not None else None
    assert fits(xc, prepared, bc)
    out = torch.full((1, n), float("nan"), dtype=dtype, device="cuda")
    fp8_row(out, xc, prepared, bc)
    want = fp8_reference(x, canonical, bias).float()
    problem = mismatch(f"{shape} static={static}", out.cpu().float(), want,
                       op_tolerance("fp8_linear", dtype))
    assert problem is None, problem


@gpu_fp8
@pytest.mark.parametrize("k", [512, 8192], ids=["kernel", "triton"])
def test_fp8_provider_serves_single_rows(monkeypatch: pytest.MonkeyPatch, k: int) -> None:
    """By default fp8_linear resolves to the kernel's provider, which takes one row
    and hands more rows, and a K past SPLIT_INPUTS (`prefers`), to Triton, all as the
    reference computes them; in a CUDA graph too."""
    from pagoda.ops.quant_reference import fp8_linear as fp8_reference
    from pagoda.quant.rtn import fp8_weight
    from pagoda_cuda import fp8_ops

    monkeypatch.delenv(fp8_ops.ENABLE_ENV, raising=False)
    assert OpTable("cuda", dtype=torch.bfloat16).providers["fp8_linear"] == "cuda/cuda_native"
    gen = torch.Generator().manual_seed(9)
    canonical = fp8_weight(torch.randn(256, k, generator=gen) / 16)
    prepared = fp8_ops.prepare_fp8(canonical.to("cuda"))
    rows_seen = []
    kernel = fp8_ops.fp8_row
    monkeypatch.setattr(fp8_ops, "fp8_row",
                        lambda *a: rows_seen.append(a[1].shape[0]) or kernel(*a))
    for m in (1, 3):
        x = torch.randn(m, k, generator=gen).to(torch.bfloat16)
        problem = mismatch(f"{m} rows", fp8_ops.fp8_linear(x.cuda(), prepared).cpu().float(),
                           fp8_reference(x, canonical).float(),
                           op_tolerance("fp8_linear", torch.bfloat16))
        assert problem is None, problem
    assert rows_seen == ([1] if k <= fp8_ops.SPLIT_INPUTS else [])
    x = torch.zeros(1, k, dtype=torch.bfloat16, device="cuda")
    fp8_ops.fp8_linear(x, prepared)  # warm
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fp8_ops.fp8_linear(x, prepared)
    x.copy_(torch.randn(1, k, generator=gen))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, fp8_ops.fp8_linear(x, prepared))


def _fp8_plans(n: int) -> list:
    """Every launch the FP8 kernel takes for N outputs, K whole and split in 3."""
    from pagoda_cuda.fp8_ops import Fp8Plan

    return [Fp8Plan(tiles, splits) for tiles in (1, 2) for splits in (1, 3)
            if n % (16 * tiles) == 0]


@gpu_fp8
@pytest.mark.parametrize("static", [False, True], ids=["per-token", "static"])
def test_fp8_plans(static: bool) -> None:
    """Every launch plan of pagoda_fp8_row (tiles of 16 outputs a block, splits of K; 3
    splits of 4160 inputs leave the last one shorter) computes the reference's fp8_linear,
    with a bias."""
    from pagoda.ops.quant_reference import fp8_linear as fp8_reference
    from pagoda.quant.rtn import fp8_weight
    from pagoda_cuda.fp8_ops import fp8_row, prepare_fp8

    n, k, dtype = 192, 4160, torch.bfloat16
    gen = torch.Generator().manual_seed(11 + static)
    canonical = fp8_weight(torch.randn(n, k, generator=gen) * k**-0.5)
    if static:
        canonical = dataclasses.replace(canonical, input_scale=torch.tensor(0.02))
    x = (torch.randn(1, k, generator=gen) * 3).to(dtype)
    bias = (torch.randn(n, generator=gen) * 0.1).to(dtype)
    prepared = prepare_fp8(canonical.to("cuda"))
    want = fp8_reference(x, canonical, bias).float()
    for plan in _fp8_plans(n):
        out = torch.full((1, n), float("nan"), dtype=dtype, device="cuda")
        fp8_row(out, x.cuda(), prepared, bias.cuda(), plan)
        problem = mismatch(f"{plan}", out.cpu().float(), want, op_tolerance("fp8_linear", dtype))
        assert problem is None, problem


@gpu_fp8
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("residual", [True, False], ids=["residual", "first"])
@pytest.mark.parametrize("static", [False, True], ids=["per-token", "static"])
def test_fp8_normed_rows(dtype: torch.dtype, residual: bool, static: bool) -> None:
    """pagoda_fp8_row on a normed row: every block's RMSNorm (the residual sum stored by
    the first) and then its quantization give the reference's norm followed by its
    fp8_linear, in every launch plan."""
    from pagoda.ops.quant_reference import fp8_linear as fp8_reference
    from pagoda.quant.rtn import fp8_weight
    from pagoda_cuda.fp8_ops import fp8_row, prepare_fp8, row_fits

    n, k = 64, 2048
    gen = torch.Generator().manual_seed(21 + residual + 2 * static)
    canonical = fp8_weight(torch.randn(n, k, generator=gen) * k**-0.5)
    if static:
        canonical = dataclasses.replace(canonical, input_scale=torch.tensor(0.01))
    prepared = prepare_fp8(canonical.to("cuda"))
    row, normed, summed = _normed_row(k, dtype, residual, 5 + static)
    assert row_fits(row)
    want = fp8_reference(normed, canonical).float()
    for plan in _fp8_plans(n):
        out = torch.full((1, n), float("nan"), dtype=dtype, device="cuda")
        if residual:
            row.summed.fill_(float("nan"))
        fp8_row(out, row, prepared, None, plan)
        problem = mismatch(f"{plan}", out.cpu().float(), want, op_tolerance("fp8_linear", dtype))
        assert problem is None, problem
        if residual:
            assert torch.equal(row.summed.cpu(), summed)


@gpu_fp8
def test_fp8_fused_layer_matmul_takes_any_row_input(monkeypatch: pytest.MonkeyPatch) -> None:
    """The FP8 provider's one-row matmul of a fused decode layer (`fp8_ops.row_matmul`): a
    normed row on the kernel, and a gated row through its op's kernel first, each as the
    ops followed by the linear compute it; Triton's op is not the provider's."""
    from pagoda.kernels.triton.row_input import RowInput
    from pagoda.models.decode_fusion import FusableLinear
    from pagoda.ops.quant_reference import fp8_linear as fp8_reference
    from pagoda.quant.rtn import fp8_weight
    from pagoda_cuda import fp8_ops
    from pagoda_cuda.triton_ops import KERNELS

    monkeypatch.delenv(fp8_ops.ENABLE_ENV, raising=False)
    dtype, k = torch.bfloat16, 1024
    canonical = fp8_weight(torch.randn(32, k, generator=torch.Generator().manual_seed(6)) / 32)
    prepared = fp8_ops.prepare_fp8(canonical.to("cuda"))
    assert fp8_ops.row_matmul(FusableLinear(KERNELS.fp8_linear, prepared, None)) is None
    matmul = fp8_ops.row_matmul(FusableLinear(fp8_ops.fp8_linear, prepared, None))
    assert matmul is not None and not matmul.rotates(64, 64)
    row, normed, summed = _normed_row(k, dtype, True, 7)
    problem = mismatch("normed", matmul(row).cpu().float(),
                       fp8_reference(normed, canonical).float(), op_tolerance("fp8_linear", dtype))
    assert problem is None, problem
    assert torch.equal(row.summed.cpu(), summed)
    gate_up = torch.randn(1, 2 * k, generator=torch.Generator().manual_seed(8)).to(dtype)
    g, u = gate_up.float().chunk(2, dim=-1)
    gated = (g * torch.sigmoid(g) * u).to(dtype)
    problem = mismatch("gated", matmul(RowInput.gated(gate_up.cuda())).cpu().float(),
                       fp8_reference(gated, canonical).float(), op_tolerance("fp8_linear", dtype))
    assert problem is None, problem
