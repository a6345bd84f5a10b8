"""Check an attention backend against the reference on random paged mixed batches.

The backend is driven the way the engine drives it: a cache of the backend's own shape
(filled with garbage), its metadata builder, then its impl over two steps. The first step
caches every sequence's context as a prefill; the second is the mixed batch under test
(prefills, prefill chunks, decodes, a sequence without query rows, padding tokens with
slot -1). Both steps' outputs are compared with the reference ops, so the check holds for
any cache layout.

With an fp8 cache (`kv_cache_dtype=FP8_KV_CACHE_DTYPE`) the backend and the reference each
quantize the same keys and values with the same scales (`KV_SCALES`: not 1, and small
enough for the largest keys to saturate), so they attend over identical cached values and
the model dtype's tolerance still applies.
"""

from __future__ import annotations

import math
import traceback
from dataclasses import dataclass

import torch

from pagoda.attention import reference
from pagoda.attention.backend import (
    FP8_KV_CACHE_DTYPE,
    AttentionBackend,
    AttentionConfig,
    KVCacheSpec,
    kv_cache_dtype_label,
)
from pagoda.testing.paged import (
    CHUNK_BATCH,
    DECODE_BATCH,
    MIXED_BATCH,
    PREFILL_BATCH,
    VERIFY_BATCH,
    PagedBatch,
    random_paged_batch,
)
from pagoda.testing.report import ConformanceReport
from pagoda.testing.tolerances import TOLERANCES, dtype_name, mismatch


@dataclass(frozen=True)
class AttentionCase:
    """One model shape and one batch of (q_len, seq_len) sequences."""

    label: str
    seqs: tuple[tuple[int, int], ...]
    num_heads: int
    num_kv_heads: int
    head_size: int
    block_size: int
    sliding_window: int | None = None
    logits_soft_cap: float | None = None
    padding: int = 0

    def config(self, dtype: torch.dtype, kv_cache_dtype: torch.dtype | None = None
               ) -> AttentionConfig:
        return AttentionConfig(self.num_heads, self.num_kv_heads, self.head_size, dtype,
                               kv_cache_dtype or dtype, self.block_size, self.sliding_window,
                               self.logits_soft_cap)


KV_SCALES = (0.0071, 0.37)
"""(key scale, value scale) of the fp8 cases: keys beyond 448 * 0.0071 = 3.2 saturate."""


ATTENTION_CASES = (
    AttentionCase("mixed batch, GQA 8/2", MIXED_BATCH, 8, 2, 64, 16, padding=2),
    AttentionCase("mixed batch, MQA 6/1, head 80, block 5", MIXED_BATCH, 6, 1, 80, 5),
    AttentionCase("decode only", DECODE_BATCH, 4, 4, 64, 16),
    AttentionCase("prefill only", PREFILL_BATCH, 4, 2, 32, 8, padding=3),
    AttentionCase("prefill chunks, head 128", CHUNK_BATCH, 8, 2, 128, 16),
    AttentionCase("sliding window 6", MIXED_BATCH, 8, 2, 64, 16, sliding_window=6),
    AttentionCase("logits soft cap 5", MIXED_BATCH, 4, 4, 32, 8, logits_soft_cap=5.0),
    AttentionCase("window 7 + soft cap 5", CHUNK_BATCH, 8, 4, 64, 16, 7, 5.0, padding=1),
    AttentionCase("verify step, GQA 8/2, window 12", VERIFY_BATCH, 8, 2, 64, 8, 12, padding=2),
)


@dataclass
class _Step:
    batch: PagedBatch
    query: torch.Tensor  # [T, H, D] on the host
    key: torch.Tensor  # [T, K, D]
    value: torch.Tensor


def _steps(case: AttentionCase, dtype: torch.dtype, gen: torch.Generator) -> list[_Step]:
    """The context step (when any sequence has context) then the step under test, both cut
    from q/k/v drawn once per token of each sequence."""
    batch = random_paged_batch(case.seqs, case.block_size, gen, num_padding=case.padding)
    heads = (case.num_heads, case.num_kv_heads, case.num_kv_heads)
    tokens = [[torch.randn(seq_len, h, case.head_size, generator=gen) for h in heads]
              for _, seq_len in case.seqs]
    if case.logits_soft_cap:  # larger queries make soft-capping change the scores
        for qkv in tokens:
            qkv[0] *= 4.0

    def step(b: PagedBatch, rows: list[tuple[int, slice]], pad: int) -> _Step:
        q, k, v = (
            torch.cat([tokens[seq][i][r] for seq, r in rows]
                      + [torch.randn(pad, h, case.head_size, generator=gen)]).to(dtype)
            for i, h in enumerate(heads)
        )
        return _Step(b, q, k, v)

    current = [(b, slice(s - q, s)) for b, (q, s) in enumerate(case.seqs)]
    context = [(b, slice(0, s - q)) for b, (q, s) in enumerate(case.seqs) if s > q]
    steps = [step(batch, current, case.padding)]
    if context:
        steps.insert(0, step(batch.context_step(), context, 0))
    return steps


def _kv_scales(kv_cache_dtype: torch.dtype) -> torch.Tensor | None:
    if kv_cache_dtype != FP8_KV_CACHE_DTYPE:
        return None
    return torch.tensor(KV_SCALES, dtype=torch.float32)


def _reference_outputs(
    case: AttentionCase, steps: list[_Step], kv_cache_dtype: torch.dtype
) -> list[torch.Tensor]:
    cache = torch.zeros(2, steps[-1].batch.num_blocks, case.block_size, case.num_kv_heads,
                        case.head_size, dtype=kv_cache_dtype)
    kv_scales = _kv_scales(kv_cache_dtype)
    outputs = []
    for s in steps:
        meta = s.batch.metadata()
        reference.write_kv_cache(s.key, s.value, cache, meta.slot_mapping, kv_scales)
        outputs.append(reference.paged_attention(
            s.query, cache, meta.block_tables, meta.query_start_loc, meta.seq_lens,
            1.0 / math.sqrt(case.head_size), case.sliding_window, case.logits_soft_cap,
            kv_scales))
    return outputs


def _run_backend(backend: type[AttentionBackend], case: AttentionCase, steps: list[_Step],
                 kv_cache_dtype: torch.dtype, device: torch.device | str
                 ) -> list[torch.Tensor]:
    spec = KVCacheSpec(case.block_size, case.num_kv_heads, case.head_size, kv_cache_dtype)
    shape = backend.kv_cache_shape(spec, steps[-1].batch.num_blocks)
    garbage = torch.randn(shape, generator=torch.Generator().manual_seed(len(steps)))
    kv_cache = garbage.to(kv_cache_dtype).to(device)  # never zeroed, as after allocation
    builder = backend.get_builder_cls()(spec, torch.device(device))
    impl = backend.get_impl_cls()(case.num_heads, case.head_size,
                                  1.0 / math.sqrt(case.head_size), case.num_kv_heads,
                                  case.sliding_window, case.logits_soft_cap)
    kv_scales = _kv_scales(kv_cache_dtype)
    extra = {} if kv_scales is None else {"kv_scales": kv_scales.to(device)}
    outputs = []
    for s in steps:
        meta = builder.build(s.batch.metadata(device))
        out = impl.forward(s.query.to(device), s.key.to(device), s.value.to(device),
                           kv_cache, meta, **extra)
        outputs.append(out)
    return outputs


def _compare(steps: list[_Step], got: list[torch.Tensor], want: list[torch.Tensor],
             dtype: torch.dtype) -> list[str]:
    """Mismatches of each step's rows that belong to a sequence (padding rows are free)."""
    names = ["context step", "step under test"][-len(steps):]
    problems = []
    for name, step, g, w in zip(names, steps, got, want, strict=True):
        rows = step.batch.num_query_tokens
        if isinstance(g, torch.Tensor) and g.shape[1:] == w.shape[1:] and len(g) >= rows:
            g = g[:rows]
        problem = mismatch(name, g, w[:rows], TOLERANCES[dtype])
        if problem:
            problems.append(problem)
    return problems


def check_attention_backend(
    backend: type[AttentionBackend],
    dtype: torch.dtype,
    *,
    device: torch.device | str = "cpu",
    seed: int = 0,
    kv_cache_dtype: torch.dtype | None = None,
) -> ConformanceReport:
    """Run `backend` on every `ATTENTION_CASES` entry it accepts and compare to the reference.

    `kv_cache_dtype` (None: `dtype`) may be another float dtype or `FP8_KV_CACHE_DTYPE`.
    Cases the backend's `validate` rejects are skipped with its reasons.
    """
    kv_cache_dtype = kv_cache_dtype or dtype
    cache = "" if kv_cache_dtype == dtype else f", {kv_cache_dtype_label(kv_cache_dtype)} cache"
    report = ConformanceReport(
        f"attention backend {backend.name!r} in {dtype_name(dtype)}{cache} (seed {seed})")
    gen = torch.Generator().manual_seed(seed)
    for case in ATTENTION_CASES:
        steps = _steps(case, dtype, gen)
        reasons = backend.validate(case.config(dtype, kv_cache_dtype))
        if reasons:
            report.skipped.append(f"{case.label}: {'; '.join(reasons)}")
            continue
        want = _reference_outputs(case, steps, kv_cache_dtype)
        try:
            got = _run_backend(backend, case, steps, kv_cache_dtype, device)
        except Exception as exc:
            tb = traceback.format_exc(limit=-3).rstrip().replace("\n", "\n    ")
            report.failures.append(f"{case.label}: raised {exc!r}\n    {tb}")
            continue
        problems = _compare(steps, got, want, dtype)
        if problems:
            report.failures.append(f"{case.label}: " + "; ".join(problems))
        else:
            report.checked.append(case.label)
    return report
