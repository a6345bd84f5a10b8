"""Conformance kit: certify that a platform's kernels and attention backends mean what
core's references mean.

- `check_kernel_provider` / `check_op`: one op implementation against its reference, over
  fresh random inputs (`op_cases`) in one dtype;
- `check_attention_backend`: an `AttentionBackend` class against the reference on random
  paged mixed batches;
- `check_greedy_parity`: a tiny model (`write_tiny_llama`) generating the same greedy
  tokens on a platform as on the CPU;
- `kernel_providers` / `attention_backends`: everything registered for a platform, to
  parametrize over;
- `pagoda.testing.pytest_plugin` and `pagoda.testing.suite`: the same as a pytest suite
  driven by ``--pagoda-platform NAME``.
"""

from pagoda.testing.attention_conformance import ATTENTION_CASES, check_attention_backend
from pagoda.testing.greedy_parity import check_greedy_parity
from pagoda.testing.op_cases import OpCase, op_cases
from pagoda.testing.op_conformance import check_kernel_provider, check_op
from pagoda.testing.providers import (
    BackendEntry,
    ProviderEntry,
    attention_backends,
    kernel_providers,
)
from pagoda.testing.report import ConformanceReport
from pagoda.testing.tiny_model import write_tiny_llama
from pagoda.testing.tolerances import DTYPES, TOLERANCES, Tolerance, dtype_name

__all__ = [
    "ATTENTION_CASES",
    "DTYPES",
    "TOLERANCES",
    "BackendEntry",
    "ConformanceReport",
    "OpCase",
    "ProviderEntry",
    "Tolerance",
    "attention_backends",
    "check_attention_backend",
    "check_greedy_parity",
    "check_kernel_provider",
    "check_op",
    "dtype_name",
    "kernel_providers",
    "op_cases",
    "write_tiny_llama",
]
