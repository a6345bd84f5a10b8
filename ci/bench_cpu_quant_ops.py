"""Time the CPU's quantized-linear providers against dense F.linear (median microseconds).

    python ci/bench_cpu_quant_ops.py [--threads 1] [--reps 15] [--budget 0.3]

Rows: SmolLM2-135M's linear shapes (576->1536, 1536->576, 576->576) and a larger one
(2048->8192), at M = 1, 16 and 256 tokens. Columns (the activation dtype after the name):
  dense f32 / dense bf16  F.linear on a dense weight (bf16 only where the CPU has native
                          bf16, or PAGODA_CPU_FAST_BF16=1);
  int8 f32 / int8 bf16    int8_linear as provided: per-token int8 activations, torch._int_mm;
  i4 g32a bf16            woq_linear, 4-bit groups of 32 with offsets (GGUF Q4_1, AWQ-like):
                          the int4 kernel plus the zero-rounding correction;
  i4 g32s bf16            4-bit symmetric groups of 32 (GGUF Q4_0, GPTQ sym): kernel only;
  fp8 bf16                fp8_linear as provided: float8-rounded activations, dense weight;
and, to show why the providers do not use them:
  i4 kern f32             the int4 kernel fed float32 activations;
  q8 split bf16           an 8-bit group weight as two 4-bit halves, one int4 kernel call;
  scaled_mm               torch._scaled_mm on float8 activations and weight (f32 out).
A cell is "-" when one call would exceed the time budget (--budget seconds).
Set ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 to see an AVX2-only CPU's kernels.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from pagoda.quant.rtn import fp8_weight, group_weight, int8_weight
from pagoda_cpu import quant_ops

SHAPES = ((576, 1536), (1536, 576), (576, 576), (2048, 8192))
TOKENS = (1, 16, 256)


def median_us(fn: Callable[[], object], reps: int, budget: float) -> float | None:
    start = time.perf_counter()
    fn()
    first = time.perf_counter() - start
    if first > budget:
        return None
    fn()
    times = []
    for _ in range(max(3, min(reps, int(budget * 10 / max(first, 1e-6))))):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def columns(k: int, n: int,
            native_bf16: bool) -> dict[str, tuple[torch.dtype, Callable[[torch.Tensor], object]]]:
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(n, k, generator=gen) * k**-0.5
    bf16 = torch.bfloat16
    dense32, dense16 = w, w.to(bf16)
    i8 = quant_ops.prepare_int8(int8_weight(w))
    i4a = quant_ops.prepare_woq(group_weight(w, 4, 32, False), bf16, native_bf16=native_bf16)
    i4s = quant_ops.prepare_woq(group_weight(w, 4, 32, True), bf16, native_bf16=native_bf16)
    fp8 = quant_ops.prepare_fp8(fp8_weight(w), bf16, native_bf16=native_bf16)
    g4 = group_weight(w, 4, 32, False)
    scales = g4.scales.float()
    kern32 = quant_ops.pack_int4(g4.codes, scales, g4.offsets + 8 * scales, 32, torch.float32)
    split = quant_ops.split_int8_layout(group_weight(w, 8, 32, True), bf16)
    f8w = fp8_weight(w)
    f8t, f8s = f8w.weight.t(), f8w.scale.view(1, -1)

    def scaled_mm(x: torch.Tensor) -> torch.Tensor:
        s = x.abs().amax(-1, keepdim=True).clamp(min=1e-12) / 448
        xq = (x / s).clamp(-448, 448).to(torch.float8_e4m3fn)
        return torch._scaled_mm(xq, f8t, s, f8s, out_dtype=torch.float32)

    f32 = torch.float32
    cols: dict[str, tuple[torch.dtype, Callable[[torch.Tensor], object]]] = {
        "dense f32": (f32, lambda x: F.linear(x, dense32))}
    if native_bf16:
        cols["dense bf16"] = (bf16, lambda x: F.linear(x, dense16))
    cols |= {
        "int8 f32": (f32, lambda x: quant_ops.int8_linear(x, i8)),
        "int8 bf16": (bf16, lambda x: quant_ops.int8_linear(x, i8)),
        "i4 g32a bf16": (bf16, lambda x: quant_ops.woq_linear(x, i4a)),
        "i4 g32s bf16": (bf16, lambda x: quant_ops.woq_linear(x, i4s)),
        "fp8 bf16": (bf16, lambda x: quant_ops.fp8_linear(x, fp8)),
        "i4 kern f32": (f32, lambda x: kern32.apply(x, None)),
        "q8 split bf16": (bf16, lambda x: split.apply(x, None)),
        "scaled_mm": (f32, scaled_mm),
    }
    return cols


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--budget", type=float, default=0.3,
                        help="skip a cell whose single call takes longer (seconds)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    native = quant_ops.fast_bf16()
    print(f"torch {torch.__version__}, ATen CPU capability "
          f"{torch.backends.cpu.get_cpu_capability()}, native bf16: {native}, "
          f"{args.threads} thread(s); median microseconds per call")
    header = None
    for k, n in SHAPES:
        cols = columns(k, n, native)
        if header is None:
            header = f"{'K->N':>10} {'M':>4} " + " ".join(f"{c:>13}" for c in cols)
            print(header)
        for m in TOKENS:
            x = torch.randn(m, k)
            cells = []
            for dtype, fn in cols.values():
                xd = x.to(dtype)
                us = median_us(lambda fn=fn, xd=xd: fn(xd), args.reps, args.budget)
                cells.append(f"{us:13.0f}" if us is not None else f"{'-':>13}")
            print(f"{k:>5}->{n:<4} {m:>4} " + " ".join(cells), flush=True)


if __name__ == "__main__":
    main()
