"""Engine configuration: what the user asked for, validated, before anything loads."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

_DTYPES = {
    "float32": torch.float32,
    "float": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "half": torch.float16,
    "fp16": torch.float16,
}
LOAD_FORMATS = ("auto", "safetensors", "gguf", "dummy")


def parse_dtype(dtype: str | torch.dtype) -> torch.dtype | None:
    """A torch dtype, or None for "auto" (the platform decides)."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        return None
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be auto or one of {sorted(_DTYPES)}, got {dtype!r}")
    return _DTYPES[dtype]


@dataclass
class ModelConfig:
    model: str | None = None
    """HF directory, .gguf file, hub id or bundled name; None for the embedded default."""
    tokenizer: str | None = None
    dtype: str | torch.dtype = "auto"
    load_format: str = "auto"
    max_model_len: int | None = None
    seed: int = 0
    served_model_name: str | None = None
    generation_config: str = "auto"
    """"auto": defaults from the model's generation_config.json; "pagoda": ours only."""
    chat_template: str | None = None
    quantization: str | None = None
    """Quantization method by name; None or "none": dense weights (GGUF ones dequantized);
    "gguf" (CPU): Q4_0/Q4_1 GGUF weights stay 4-bit."""

    def __post_init__(self) -> None:
        parse_dtype(self.dtype)
        if self.load_format not in LOAD_FORMATS:
            raise ValueError(f"load_format must be one of {LOAD_FORMATS}, got {self.load_format!r}")
        if self.max_model_len is not None and self.max_model_len < 1:
            raise ValueError(f"max_model_len must be >= 1, got {self.max_model_len}")
        if self.generation_config not in ("auto", "pagoda"):
            raise ValueError(
                f"generation_config must be 'auto' or 'pagoda', got {self.generation_config!r}"
            )


@dataclass
class CacheConfig:
    block_size: int = 16
    kv_cache_memory: int | None = None
    """Bytes of KV cache; None: `memory_fraction` of the device's free memory, or the
    platform's default when that is None too."""
    memory_fraction: float | None = None
    """Fraction of the device's free memory (after loading) for the KV cache."""
    gpu_memory_utilization: float | None = None
    """Fraction of the device's total memory this engine may fill: weights, the largest
    step's activations (measured by a profiling pass), the KV cache; None: the platform's
    default (0.9 on GPUs)."""
    kv_cache_dtype: str | torch.dtype = "auto"
    enable_prefix_caching: bool = True
    num_blocks_override: int | None = None
    """Exact number of KV blocks (tests, benchmarks); overrides the memory settings."""

    def __post_init__(self) -> None:
        if self.block_size < 1 or self.block_size & (self.block_size - 1):
            raise ValueError(f"block_size must be a power of two, got {self.block_size}")
        if self.kv_cache_memory is not None and self.kv_cache_memory <= 0:
            raise ValueError(f"kv_cache_memory must be > 0 bytes, got {self.kv_cache_memory}")
        if self.memory_fraction is not None and not 0 < self.memory_fraction <= 1:
            raise ValueError(f"memory_fraction must be in (0, 1], got {self.memory_fraction}")
        if self.gpu_memory_utilization is not None and not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got "
                             f"{self.gpu_memory_utilization}")
        if self.num_blocks_override is not None and self.num_blocks_override < 1:
            raise ValueError(f"num_blocks_override must be >= 1, got {self.num_blocks_override}")
        parse_dtype(self.kv_cache_dtype)


@dataclass
class SchedulerConfig:
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    policy: str = "fcfs"
    """"fcfs" or "priority" (lower value first, then arrival)."""
    enable_chunked_prefill: bool = True
    async_scheduling: bool | None = None
    """Schedule step N+1 while step N runs; None: where the platform's device runs
    asynchronously from the host."""

    def __post_init__(self) -> None:
        if self.max_num_seqs < 1:
            raise ValueError(f"max_num_seqs must be >= 1, got {self.max_num_seqs}")
        if self.max_num_batched_tokens < 1:
            raise ValueError(
                f"max_num_batched_tokens must be >= 1, got {self.max_num_batched_tokens}"
            )
        if self.policy not in ("fcfs", "priority"):
            raise ValueError(f"policy must be 'fcfs' or 'priority', got {self.policy!r}")


@dataclass
class EngineConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    device: str | None = None
    """Platform name, "auto" or None (PAGODA_DEVICE, else auto)."""
    attention_backend: str | None = None
    executor: str | None = None
    enforce_eager: bool = False
    """Never replay device graphs (every step launches its kernels from Python)."""
    graph_batch_sizes: list[int] | None = None
    """Decode batch sizes captured as device graphs; None: 1, 2, 4, 8, ... up to
    max_num_seqs. Only on platforms that support graph capture."""

    def __post_init__(self) -> None:
        if self.graph_batch_sizes is not None and (
            not self.graph_batch_sizes or min(self.graph_batch_sizes) < 1
        ):
            raise ValueError(f"graph_batch_sizes must be positive integers, got "
                             f"{self.graph_batch_sizes}")

    @classmethod
    def from_options(
        cls,
        *,
        model: str | None = None,
        tokenizer: str | None = None,
        device: str | None = None,
        dtype: str | torch.dtype = "auto",
        max_model_len: int | None = None,
        max_num_seqs: int = 256,
        max_num_batched_tokens: int = 2048,
        block_size: int = 16,
        kv_cache_memory: int | None = None,
        memory_fraction: float | None = None,
        gpu_memory_utilization: float | None = None,
        num_kv_blocks: int | None = None,
        kv_cache_dtype: str | torch.dtype = "auto",
        enable_prefix_caching: bool = True,
        enable_chunked_prefill: bool = True,
        scheduling_policy: str = "fcfs",
        async_scheduling: bool | None = None,
        enforce_eager: bool = False,
        graph_batch_sizes: list[int] | None = None,
        attention_backend: str | None = None,
        load_format: str = "auto",
        seed: int = 0,
        generation_config: str = "auto",
        chat_template: str | None = None,
        quantization: str | None = None,
        served_model_name: str | None = None,
    ) -> EngineConfig:
        """The nested config from the flat options `LLM(...)` and the CLI share."""
        return cls(
            model=ModelConfig(model, tokenizer, dtype, load_format, max_model_len, seed,
                              served_model_name, generation_config, chat_template,
                              quantization),
            cache=CacheConfig(block_size, kv_cache_memory, memory_fraction,
                              gpu_memory_utilization, kv_cache_dtype, enable_prefix_caching,
                              num_kv_blocks),
            scheduler=SchedulerConfig(max_num_seqs, max_num_batched_tokens, scheduling_policy,
                                      enable_chunked_prefill, async_scheduling),
            device=device,
            attention_backend=attention_backend,
            enforce_eager=enforce_eager,
            graph_batch_sizes=graph_batch_sizes,
        )
