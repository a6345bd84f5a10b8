"""The quantized-linear kernels (`pagoda.kernels.triton.quant_linear`) against bf16 F.linear on
Llama-3-8B's matmul shapes, on one GPU; prints a table, writes JSON.

    python3 ci/bench_quant_kernels.py [--rows 1 8 64 1024 4096] [--shapes qkv o gate_up down]
                                      [--ops fp8 fp8-block int8 int4] [--json PATH]
    (or: bash ci/gpu.sh quantbench [same arguments])

Every path of every op is timed where it applies: "auto" (what the provider runs for that
many rows) and each kernel on its own (the one-row FP8 kernel's tiles (`row_gemv`), the Triton
gemv's register and tl.dot paths, the Triton gemm, torch._scaled_mm and torch._int_mm after
the activation-quantization kernel), and for INT4 PyTorch's own kernel for reference.
Times are CUDA-graph replays of at least CALLS launches cycling through enough copies of
the weight to overflow L2 several times (so every launch streams its weight from HBM, as a
model's layers do), median of REPLAYS, as ci/gemv_bench.py does. TB/s is weight bytes
(codes + scales) / time, TF/s 2 M N K / time. Each output is first checked against
`pagoda.ops.quant_reference` within the conformance tolerance; a path that does not match
is reported and not timed. The summary adds up one 8B decode step's matmuls (32 layers x
qkv, o, gate_up, down; lm_head left out) per op at one row, beside the goals: FP8 needs the
gemv at >= 3.3 TB/s, INT4 >= 3 TB/s of packed weights.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
import triton

sys.path.insert(0, str(Path(__file__).parent))
from gemv_bench import graph_seconds  # noqa: E402

from pagoda.kernels.triton import quant_linear as ql  # noqa: E402
from pagoda.kernels.triton.common import GemvTiles, parallel_units  # noqa: E402
from pagoda.kernels.triton.gemv import num_k_splits  # noqa: E402
from pagoda.kernels.triton.quant_prims import quantize_activations, scale_rows  # noqa: E402
from pagoda.kernels.triton.row_gemv import fp8_row_gemv  # noqa: E402
from pagoda.kernels.triton.scaled_gemm import QGemvPlan, qgemm, qgemv  # noqa: E402
from pagoda.kernels.triton.woq_dot import DOT_MAX_ROWS, woq_dot  # noqa: E402
from pagoda.kernels.triton.woq_gemm import woq_gemm, woq_gemv  # noqa: E402
from pagoda.ops import quant_reference  # noqa: E402
from pagoda.quant.rtn import fp8_weight, group_weight, int8_weight  # noqa: E402
from pagoda.testing.tolerances import mismatch, op_tolerance  # noqa: E402

MMA_MAX_ROWS = 16


def _native() -> Callable[[int], Callable[..., Any]] | None:
    """pagoda-cuda's CUDA C++ kernel (`pagoda_cuda.woq_ops.woq4_mma`, for "int4") at a
    number of warps a block, where the library is built and runs here; else None."""
    try:
        from pagoda_cuda import native, woq_ops
    except ImportError:
        return None
    if native.unavailable() is not None:
        print(f"cuda mma: not timed ({native.unavailable()})")
        return None

    def at(warps: int) -> Callable[..., Any]:
        def call(x: torch.Tensor, w: Any) -> torch.Tensor:
            out = torch.empty(x.shape[0], w.shape[0], dtype=x.dtype, device=x.device)
            return woq_ops.woq4_mma(out, x, w, None, warps)
        return call
    return at


native_mma = _native()


def _native_fp8_row(x: torch.Tensor, w: ql.ScaledWeight) -> torch.Tensor:
    """pagoda-cuda's FP8 one-row kernel (`pagoda_cuda.fp8_ops.fp8_row`; sm_89 on)."""
    from pagoda_cuda import fp8_ops

    out = torch.empty(1, w.shape[0], dtype=x.dtype, device=x.device)
    return fp8_ops.fp8_row(out, x, w, None)


def prepare_int4(weight: Any, dtype: torch.dtype) -> Any:
    """pagoda-cuda's `woq_linear` preparation where it is installed, else Triton's."""
    try:
        from pagoda_cuda.woq_ops import prepare_woq
    except ImportError:
        return ql.prepare_woq(weight, dtype)
    return prepare_woq(weight, dtype)


SHAPES = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096),
          "down": (4096, 14336)}
"""Llama-3-8B: name -> (N, K) of the weight [N, K]."""
LAYERS = 32
L2_OVERFLOW = 4
GOALS = {"fp8": 3.3e12, "int4": 3.0e12}
"""Weight bytes per second the one-row path must stream for the decode-step goals."""
OPS = ("fp8", "fp8-block", "int8", "int4")
REFERENCE = {"fp8": "fp8_linear", "fp8-block": "fp8_linear", "int8": "int8_linear",
             "int4": "woq_linear"}


def nbytes(weight: Any) -> int:
    """Bytes a matmul reads of a weight: every tensor of it."""
    if isinstance(weight, torch.Tensor):
        return weight.numel() * weight.element_size()
    return sum(nbytes(getattr(weight, f.name)) for f in dataclasses.fields(weight)
               if isinstance(getattr(weight, f.name), torch.Tensor))


def copies_of(weight: Any, l2: int) -> list[Any]:
    count = max(1, math.ceil(L2_OVERFLOW * l2 / nbytes(weight)))
    if isinstance(weight, torch.Tensor):
        return [weight] + [weight.clone() for _ in range(count - 1)]
    clone = lambda w: dataclasses.replace(w, **{  # noqa: E731
        f.name: getattr(w, f.name).clone() for f in dataclasses.fields(w)
        if isinstance(getattr(w, f.name), torch.Tensor)})
    return [weight] + [clone(weight) for _ in range(count - 1)]


def _scaled_mm(x: torch.Tensor, w: ql.ScaledWeight) -> torch.Tensor:
    xq, xs = quantize_activations(x, False)
    return torch._scaled_mm(xq, w.weight.t(), scale_a=xs, scale_b=w.scale.view(1, -1),
                            out_dtype=x.dtype)


def _int_mm(x: torch.Tensor, w: ql.ScaledWeight) -> torch.Tensor:
    xq, xs = quantize_activations(x, True)
    out = torch.empty(x.shape[0], w.shape[0], dtype=x.dtype, device=x.device)
    return scale_rows(out, torch._int_mm(xq, w.weight.t()), xs, w.scale, None)


def _triton_gemm(x: torch.Tensor, w: ql.ScaledWeight) -> torch.Tensor:
    int8 = w.weight.dtype == torch.int8
    xq, xs = quantize_activations(x, int8, w.input_scale, w.block[1] if w.block else None)
    out = torch.empty(x.shape[0], w.shape[0], dtype=x.dtype, device=x.device)
    return qgemm(out, xq, xs, w.weight, w.scale, None, block=w.block)


def _gemv(plan: QGemvPlan | None) -> Callable[[torch.Tensor, Any], torch.Tensor]:
    def call(x: torch.Tensor, w: ql.ScaledWeight) -> torch.Tensor:
        out = torch.empty(x.shape[0], w.shape[0], dtype=x.dtype, device=x.device)
        return qgemv(out, x, None, w.weight, w.scale, None, x_mode=0, block=w.block, plan=plan)
    return call


def _woq(kernel: Callable[..., torch.Tensor], plan: Any = None
         ) -> Callable[[torch.Tensor, Any], torch.Tensor]:
    def call(x: torch.Tensor, w: Any) -> torch.Tensor:
        out = torch.empty(x.shape[0], w.shape[0], dtype=x.dtype, device=x.device)
        return kernel(out, x, w, None, plan)
    return call


ROW_TILES = ((8, 1024), (16, 512), (32, 256), (64, 128), (16, 1024), (32, 512), (64, 256),
             (128, 128))
"""(weight rows, K) tiles of the one-row FP8 kernel tried at one row (4 warps: 8 were slower
on every 8B shape on the H200)."""


WOQ_ROW_LAUNCHES = ((8, 512, 4, 5), (8, 512, 8, 4), (8, 1024, 8, 3), (16, 512, 8, 4),
                    (4, 512, 4, 6), (8, 256, 4, 8), (8, 1024, 4, 5), (8, 1024, 4, 8),
                    (16, 1024, 8, 4), (8, 2048, 8, 3))
"""(weight rows, K, warps, stages) of the one-row INT4 gemv tried beside the tiles above (4
warps, 3 stages): its (8, 1024) plan takes 236 registers a thread on sm_90, two programs an
SM, about 24 KB of weight in flight an SM where 4.2 TB/s needs about 32 KB."""


WOQ_DOT_LAUNCHES = ((64, 2, 4, 4), (128, 2, 8, 3), (128, 1, 8, 4))
"""(weight rows, groups a step, warps, stages) of the tensor-core INT4 kernel
(`woq_dot`), K split as its plan splits."""


def _row_plans(n: int, k: int, units: int) -> list[GemvTiles]:
    return [GemvTiles(bn, bk, num_k_splits(triton.cdiv(n, bn), k, units))
            for bn, bk in ROW_TILES if bk <= k]


def _fp8_row(plan: GemvTiles) -> Callable[[torch.Tensor, Any], torch.Tensor]:
    def call(x: torch.Tensor, w: ql.ScaledWeight) -> torch.Tensor:
        out = torch.empty(1, w.shape[0], dtype=x.dtype, device=x.device)
        return fp8_row_gemv(out, x, None, w.weight, w.scale, None, plan)
    return call



def paths(op: str, m: int, n: int, k: int, units: int) -> dict[str, Callable[..., Any]]:
    """Name -> call(x, prepared weight) of every path that applies to `op` at m rows."""
    fma_splits = num_k_splits(triton.cdiv(n, 8), k, units)
    fma = QGemvPlan(8, 512, False, fma_splits, 4, 3)
    found: dict[str, Callable[..., Any]] = {}
    if op == "int4":
        found["auto"] = ql.woq_linear
        if m <= 8:
            for bn, bk in ((8, 1024), (16, 512), (4, 1024), (8, 512), (16, 128), (8, 128)):
                if bn * bk * triton.next_power_of_2(m) <= 8192:
                    plan = GemvTiles(bn, bk, num_k_splits(triton.cdiv(n, bn), k, units))
                    found[f"gemv fma {plan.label}"] = _woq(woq_gemv, plan)
        if m == 1:  # more weight in flight: fewer registers a thread, more stages or warps
            for bn, bk, warps, stages in WOQ_ROW_LAUNCHES:
                plan = GemvTiles(bn, bk, num_k_splits(triton.cdiv(n, bn), k, units), warps,
                                 stages)
                found[f"gemv fma {plan.label}"] = _woq(woq_gemv, plan)
        if m <= DOT_MAX_ROWS:
            for bn, steps, warps, stages in WOQ_DOT_LAUNCHES:
                plan = GemvTiles(bn, steps * 128, num_k_splits(triton.cdiv(n, bn), k, units),
                                 warps, stages)
                found[f"dot {plan.label}"] = _woq(woq_dot, plan)
        found["triton gemm"] = _woq(woq_gemm)
        if m <= MMA_MAX_ROWS and native_mma is not None:
            from pagoda_cuda.woq_ops import WIDE_MAX_ROWS  # importable: native_mma is set
            for warps in (16, 8, 4) if m <= WIDE_MAX_ROWS else (8, 4):
                found[f"cuda mma w{warps}"] = native_mma(warps)
        return found
    found["auto"] = ql.int8_linear if op == "int8" else ql.fp8_linear
    if m <= 16:
        found["gemv dot"] = _gemv(None)
    if m <= 4 and op != "fp8-block":
        found["gemv fma"] = _gemv(fma)
    if m == 1 and op == "fp8":
        for plan in _row_plans(n, k, units):
            found[f"row {plan.label}"] = _fp8_row(plan)
        if native_mma is not None:  # the library runs here: its FP8 row kernel too
            found["cuda fp8_row"] = _native_fp8_row
    if op == "fp8" and k % 16 == 0 and n % 16 == 0:
        found["scaled_mm"] = _scaled_mm
    if op == "int8" and m > 16:
        found["int_mm"] = _int_mm
    found["triton gemm"] = _triton_gemm
    return found


def tinygemm(canonical: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """PyTorch's own int4 kernel's operands (`torch.ops.aten._weight_int4pack_mm`, innerKTiles
    8) for a 4-bit `GroupQuantWeight`: the packed codes and [groups, N, 2] bf16 scales and
    zeros (w = (code - 8) * scale + zero, the zero rounded to bf16)."""
    codes = canonical.codes.to(torch.int32)
    packed = torch.ops.aten._convert_weight_to_int4pack(
        ((codes[:, ::2] << 4) | codes[:, 1::2]).to(torch.uint8), 8)
    s, o = canonical.scales.float(), canonical.offsets.float()
    return packed, torch.stack([s, o + 8 * s], -1).transpose(0, 1).contiguous().bfloat16()


def tinygemm_row(name: str, m: int, x: torch.Tensor, canonical: Any, want: torch.Tensor,
                 flops: int, l2: int) -> dict[str, Any]:
    """PyTorch's int4 kernel timed beside ours for reference (Pagoda does not serve it: it
    needs its own copy of the weight and rounds each zero to bf16); its largest error,
    relative to the largest output, goes in the path's label."""
    packed, sz = tinygemm(canonical)
    group = canonical.group_size
    got = torch.ops.aten._weight_int4pack_mm(x, packed, group, sz).float()
    err = ((got - want.float()).abs().max() / want.float().abs().max()).item()
    seconds = graph_seconds(lambda w: torch.ops.aten._weight_int4pack_mm(x, w, group, sz),
                            copies_of(packed, l2))
    return {"shape": name, "rows": m, "op": "int4", "path": f"torch tinygemm (err {err:.0e})",
            "flops": flops, "bytes": nbytes(packed) + nbytes(sz), "seconds": seconds,
            "error": None}


def weights(op: str, dense: torch.Tensor) -> tuple[Any, Any]:
    """(canonical weight, prepared weight) of `op` made from the dense bf16 weight."""
    if op == "int4":  # as the engine prepares it (with pagoda-cuda, the zero points its
        # CUDA C++ kernel reads too; the Triton kernels take the same prepared weight)
        canonical = group_weight(dense, 4, 128)
        return canonical, prepare_int4(canonical, dense.dtype)
    if op == "int8":
        canonical = int8_weight(dense)
        return canonical, ql.prepare_int8(canonical)
    canonical = fp8_weight(dense, (128, 128) if op == "fp8-block" else None)
    return canonical, ql.prepare_fp8(canonical)


def bench(name: str, m: int, ops: list[str], units: int, l2: int) -> list[dict[str, Any]]:
    n, k = SHAPES[name]
    gen = torch.Generator(device="cuda").manual_seed(m)
    dense = (torch.randn(n, k, device="cuda", generator=gen) * k**-0.5).to(torch.bfloat16)
    x = (torch.randn(m, k, device="cuda", generator=gen) * 2).to(torch.bfloat16)
    flops = 2 * m * n * k
    rows = [{"shape": name, "rows": m, "op": "bf16", "path": "F.linear", "bytes": nbytes(dense),
             "seconds": graph_seconds(lambda w: F.linear(x, w), copies_of(dense, l2)),
             "flops": flops, "error": None}]
    for op in ops:
        canonical, prepared = weights(op, dense)
        want = getattr(quant_reference, REFERENCE[op])(x, canonical)
        tol = op_tolerance(REFERENCE[op], x.dtype)
        copies = copies_of(prepared, l2)
        for label, call in paths(op, m, n, k, units).items():
            row = {"shape": name, "rows": m, "op": op, "path": label, "flops": flops,
                   "bytes": nbytes(prepared), "seconds": math.nan}
            try:
                row["error"] = mismatch("output", call(x, prepared), want, tol)
                if row["error"] is None:
                    row["seconds"] = graph_seconds(lambda w, c=call: c(x, w), copies)
            except Exception as exc:  # report, keep going
                row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:100]}"
            rows.append(row)
        if op == "int4" and hasattr(torch.ops.aten, "_weight_int4pack_mm"):
            rows.append(tinygemm_row(name, m, x, canonical, want, flops, l2))
        del canonical, prepared, copies, want
        torch.cuda.empty_cache()
    return rows


def report(rows: list[dict[str, Any]]) -> None:
    print(f"\n{'shape':8} {'rows':>5} {'op':9} {'path':28} {'us':>9} {'TB/s':>6} {'TF/s':>7} "
          f"{'x bf16':>6}")
    bf16 = {(r["shape"], r["rows"]): r["seconds"] for r in rows if r["op"] == "bf16"}
    for r in rows:
        s = r["seconds"]
        print(f"{r['shape']:8} {r['rows']:5} {r['op']:9} {r['path']:28} {s * 1e6:9.1f} "
              f"{r['bytes'] / s / 1e12:6.2f} {r['flops'] / s / 1e12:7.1f} "
              f"{bf16[r['shape'], r['rows']] / s:6.2f}"
              + (f"  MISMATCH {r['error']}" if r["error"] else ""))
    one = [r for r in rows if r["rows"] == 1 and r["path"] in ("auto", "F.linear")]
    if {r["shape"] for r in one} != set(SHAPES):
        return
    print(f"\n8B decode step, matmuls only ({LAYERS} layers x {', '.join(SHAPES)}), one row:")
    for op in dict.fromkeys(r["op"] for r in one):
        mine = [r for r in one if r["op"] == op]
        seconds = LAYERS * sum(r["seconds"] for r in mine)
        streamed = LAYERS * sum(r["bytes"] for r in mine) / seconds
        goal = GOALS.get(op)
        print(f"  {op:9} {seconds * 1e3:6.3f} ms, {streamed / 1e12:.2f} TB/s"
              + (f" (goal >= {goal / 1e12:.1f} TB/s: {'met' if streamed >= goal else 'NOT met'})"
                 if goal else ""))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 8, 64, 1024, 4096])
    parser.add_argument("--shapes", nargs="+", choices=list(SHAPES), default=list(SHAPES))
    parser.add_argument("--ops", nargs="+", choices=OPS, default=list(OPS))
    parser.add_argument("--json", help="write every measurement here")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("bench_quant_kernels needs a CUDA GPU")
        return 1
    device = torch.device("cuda", torch.cuda.current_device())
    props = torch.cuda.get_device_properties(device)
    units, l2 = parallel_units(device), props.L2_cache_size
    print(f"{props.name}: {units} SMs, L2 {l2 / 2**20:.0f} MiB; torch {torch.__version__}, "
          f"triton {triton.__version__}")
    rows: list[dict[str, Any]] = []
    for m in args.rows:
        for name in args.shapes:
            rows += bench(name, m, args.ops, units, l2)
            print(f"  {name} x{m}: {len(rows)} measurements", flush=True)
    report(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": props.name, "results": rows}, f, indent=1)
    bad = [r for r in rows if r["error"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
