"""The options of `pagoda bench`: a random workload, and what each benchmark adds to it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass
class WorkloadConfig:
    """Random prompts of token ids, each generating a set number of tokens."""

    input_len: int = 128
    """Prompt length in tokens."""
    output_len: int = 128
    """Tokens each request generates (end of sequence ignored)."""
    range_ratio: float = 0.0
    """Lengths uniform in [len*(1-r), len*(1+r)]."""
    output_json: str | None = None
    """Write the results to this file."""


@dataclass
class OfflineBenchConfig(WorkloadConfig):
    """A workload run in this process by one or more backends, side by side."""

    backend: str = "pagoda"
    """Comma-separated: pagoda, hf (pagoda,hf runs both in one run)."""
    temperature: float = 0.0
    """Sampling temperature; 0: greedy."""
    hf_batch_size: int = 16
    """Static batch size of the hf backend."""
    hf_cache: Literal["dynamic", "static"] = "dynamic"
    """KV cache of the hf backend. static: preallocated, and on a GPU transformers then
    compiles the decode forward (torch.compile, CUDA graphs): HF at its strongest for a
    few requests."""
    structured_output: Literal["none", "json-schema"] = "none"
    """Constrain every request's output (pagoda backend): json-schema puts one JSON schema
    (an object holding an array of records) on each."""


@dataclass
class ThroughputConfig(OfflineBenchConfig):
    """`pagoda bench throughput`: one batch of prompts, all submitted at once."""

    num_prompts: int = 100
    """Number of prompts."""
    num_warmup_prompts: int | None = None
    """Prompts run untimed first (other random ones, of the same lengths), so that the
    timed run meets no first-use cost a server in its steady state has paid (a kernel
    variant compiled for a step shape the run reaches, a library loaded); None: as many as
    num_prompts, 0: none."""

    def __post_init__(self) -> None:
        if self.num_warmup_prompts is not None and self.num_warmup_prompts < 0:
            raise ValueError(f"num_warmup_prompts must be >= 0, got {self.num_warmup_prompts}")


@dataclass
class LatencyConfig(OfflineBenchConfig):
    """`pagoda bench latency`: one batch, timed end to end, repeated."""

    batch_size: int = 8
    """Prompts in the batch."""
    num_iters: int = 5
    """Timed runs."""
    num_iters_warmup: int = 1
    """Untimed runs first."""
