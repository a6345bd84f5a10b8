"""Time the CPU's quantized-linear providers against dense F.linear (median microseconds).

    python ci/bench_cpu_quant_ops.py [--threads 1] [--reps 11] [--budget 0.5] [--hot]

Rows: SmolLM2-135M's linear shapes (576->1536, 1536->576, 576->576) and a larger one
(2048->8192), at M = 1, 16 and 256 tokens. Columns (the activation dtype after the name):
  dense f32 / dense bf16  F.linear on a dense weight (bf16 is slow without native bf16);
  int8 f32 / int8 bf16    int8_linear as provided: per-token int8 activations, torch._int_mm
                          (dense where _int_mm is not exact: CPUs without VNNI);
  i4 g32a bf16            woq_linear, 4-bit groups of 32 with offsets (GGUF Q4_1, AWQ-like):
                          the int4 kernel plus the zero-rounding correction;
  i4 g32s bf16            4-bit symmetric groups of 32 (GGUF Q4_0, GPTQ sym): kernel only;
  fp8 bf16                fp8_linear as provided: float8-rounded activations, dense weight
                          (bf16, or float32 without native bf16);
and, to show why the providers do not use them:
  i4 kern f32             the int4 kernel fed float32 activations;
  q8 split bf16           an 8-bit group weight as two 4-bit halves, one int4 kernel call;
  scaled_mm               torch._scaled_mm on float8 activations and weight (f32 out).
A cell is "-" when one call would exceed the time budget (--budget seconds). By default
the caches are flushed before each call (a decode step of a model larger than the caches
reads every weight from memory); --hot repeats each call back to back instead. Set
ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 PAGODA_CPU_FAST_BF16=0 to see what an
AVX2-only CPU (Zen 3) would run, with its kernels. Other processes on the machine move
these numbers by up to 2x between runs: compare within a row, and repeat.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from pagoda.quant.rtn import fp8_weight, group_weight, int8_weight
from pagoda.quant.tensors import GroupQuantWeight
from pagoda_cpu import quant_ops
from pagoda_cpu.quant_layouts import Int4Layout, pack_int4

SHAPES = ((576, 1536), (1536, 576), (576, 576), (2048, 8192))
TOKENS = (1, 16, 256)
FLUSH_BYTES = 128 * 2**20


def medians_us(fns: list[Callable[[], object]], reps: int, budget: float,
               flush: torch.Tensor | None) -> list[float | None]:
    """Median microseconds of each call; a call whose first run takes longer than `budget`
    seconds is left out (None).

    With `flush` (a buffer larger than the caches, read before every timed call) the calls
    are timed in interleaved rounds, one of each per round, so that load from other
    processes hits every column alike, and each call reads its weight from memory, as in a
    model larger than the caches (the flush evicts the code too, which adds a little to
    every op of a call). Without it, each call is repeated back to back: its weight stays
    in the caches where it fits.
    """
    first = []
    for fn in fns:
        start = time.perf_counter()
        fn()
        first.append(time.perf_counter() - start)
    live = [i for i, t in enumerate(first) if t <= budget]
    times: dict[int, list[float]] = {i: [] for i in live}
    rounds = [live] * reps if flush is not None else [[i] * reps for i in live]
    for order in rounds:
        for i in order:
            if flush is not None:
                flush.sum()  # reads: leaves clean lines, no write-backs
            start = time.perf_counter()
            fns[i]()
            times[i].append(time.perf_counter() - start)
    return [statistics.median(times[i]) * 1e6 if i in times else None
            for i in range(len(fns))]


def split_int8_layout(weight: GroupQuantWeight, dtype: torch.dtype) -> Int4Layout:
    """An 8-bit weight exactly as two 4-bit halves over 2K inputs (x repeated):
    w = c * s + o = hi * 16s + lo * s + o, c = 16 hi + lo; the kernel's zero is o + 128s
    for the high half (w_hi = (hi - 8) * 16s + zero) and 8s for the low one. Checked
    against the dequantized weight before it is timed."""
    s, o = weight.scales.float(), weight.offsets.float()
    codes = torch.cat([weight.codes >> 4, weight.codes & 15], dim=1)
    layout = pack_int4(codes, torch.cat([16 * s, s], 1), torch.cat([o + 128 * s, 8 * s], 1),
                       weight.group_size, dtype)
    x = torch.randn(3, weight.shape[1]).to(dtype)
    got = layout.apply(torch.cat([x, x], 1), None).float()
    want = x.float() @ weight.dequantize().T
    assert torch.allclose(got, want, rtol=2e-2, atol=2e-2), "the split layout is not exact"
    return layout


def columns(k: int, n: int,
            native_bf16: bool) -> dict[str, tuple[torch.dtype, Callable[[torch.Tensor], object]]]:
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(n, k, generator=gen) * k**-0.5
    bf16 = torch.bfloat16
    dense32, dense16 = w, w.to(bf16)
    i8_32 = quant_ops.prepare_int8(int8_weight(w), torch.float32, native_bf16=native_bf16)
    i8_16 = quant_ops.prepare_int8(int8_weight(w), bf16, native_bf16=native_bf16)
    i4a = quant_ops.prepare_woq(group_weight(w, 4, 32, False), bf16, native_bf16=native_bf16)
    i4s = quant_ops.prepare_woq(group_weight(w, 4, 32, True), bf16, native_bf16=native_bf16)
    fp8 = quant_ops.prepare_fp8(fp8_weight(w), bf16, native_bf16=native_bf16)
    g4 = group_weight(w, 4, 32, False)
    scales = g4.scales.float()
    kern32 = pack_int4(g4.codes, scales, g4.offsets + 8 * scales, 32, torch.float32)
    split = split_int8_layout(group_weight(w, 8, 32, True), bf16)
    f8w = fp8_weight(w)
    f8t, f8s = f8w.weight.t(), f8w.scale.view(1, -1)

    def scaled_mm(x: torch.Tensor) -> torch.Tensor:
        s = x.abs().amax(-1, keepdim=True).clamp(min=1e-12) / 448
        xq = (x / s).clamp(-448, 448).to(torch.float8_e4m3fn)
        return torch._scaled_mm(xq, f8t, s, f8s, out_dtype=torch.float32)

    f32 = torch.float32
    cols: dict[str, tuple[torch.dtype, Callable[[torch.Tensor], object]]] = {
        "dense f32": (f32, lambda x: F.linear(x, dense32)),
        "dense bf16": (bf16, lambda x: F.linear(x, dense16)),
        "int8 f32": (f32, lambda x: quant_ops.int8_linear(x, i8_32)),
        "int8 bf16": (bf16, lambda x: quant_ops.int8_linear(x, i8_16)),
        "i4 g32a bf16": (bf16, lambda x: quant_ops.woq_linear(x, i4a)),
        "i4 g32s bf16": (bf16, lambda x: quant_ops.woq_linear(x, i4s)),
        "fp8 bf16": (bf16, lambda x: quant_ops.fp8_linear(x, fp8)),
        "i4 kern f32": (f32, lambda x: kern32.apply(x, None)),
        "q8 split bf16": (bf16, lambda x: split.apply(torch.cat([x, x], 1), None)),
        "scaled_mm": (f32, scaled_mm),
    }
    return cols


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--reps", type=int, default=11)
    parser.add_argument("--budget", type=float, default=0.5,
                        help="skip a cell whose single call takes longer (seconds)")
    parser.add_argument("--hot", action="store_true",
                        help="repeat each call back to back, caches warm (default: flush them)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    native = quant_ops.fast_bf16()
    flush = None if args.hot else torch.zeros(FLUSH_BYTES // 4)
    print(f"torch {torch.__version__}, ATen CPU capability "
          f"{torch.backends.cpu.get_cpu_capability()}, native bf16: {native}, "
          f"exact _int_mm: {quant_ops.int_mm_exact()}, "
          f"{args.threads} thread(s), caches {'warm' if args.hot else 'flushed'}; "
          "median microseconds per call")
    header = None
    for k, n in SHAPES:
        cols = columns(k, n, native)
        if header is None:
            header = f"{'K->N':>10} {'M':>4} " + " ".join(f"{c:>13}" for c in cols)
            print(header)
        for m in TOKENS:
            x = torch.randn(m, k)
            fns = [lambda fn=fn, xd=x.to(dtype): fn(xd) for dtype, fn in cols.values()]
            cells = [f"{us:13.0f}" if us is not None else f"{'-':>13}"
                     for us in medians_us(fns, args.reps, args.budget, flush)]
            print(f"{k:>5}->{n:<4} {m:>4} " + " ".join(cells), flush=True)


if __name__ == "__main__":
    main()
