"""The Platform interface: one per device family, capabilities as data."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import torch

if TYPE_CHECKING:
    from pagoda.models.decode_fusion import DecodeLayerSpec, FusedDecodeLayer
    from pagoda.platforms.graphs import GraphCapture
    from pagoda.platforms.step_padding import StepPadding, StepShape


@dataclass(frozen=True)
class MemoryInfo:
    """Device memory in bytes."""

    total: int
    available: int


def budget_within_utilization(memory: MemoryInfo, utilization: float) -> int:
    """KV cache bytes when this process may fill `utilization` of the device's total memory:
    everything already in use counts against that share (weights, runtime context, cached
    allocator blocks, other processes, and what `memory` reserves for activations)."""
    in_use = memory.total - memory.available
    return max(0, int(memory.total * utilization) - in_use)


DEFAULT_QUANTIZED_HEAD_MAX_ROWS = 16
"""`Platform.quantized_head_max_rows` unless a platform measured otherwise: decode-sized
steps. On an H100 (bf16) Llama-3-8B's head as a Q8_0 table against the dense one: 220 against
339 µs at one row, 379 against 364 at 16, 510 against 372 at 64 (docs/benchmarks.md)."""


class Platform(ABC):
    """A device family. Core asks the platform what it supports; it never asks "is this X?".

    Subclasses fill in the class attributes (capabilities) and the few queries below.
    """

    name: ClassVar[str]
    """Name used by `--device` (e.g. "cpu", "cuda")."""

    device_type: ClassVar[str]
    """torch device type tensors live on (e.g. "cpu", "cuda", "xla")."""

    supported_dtypes: ClassVar[tuple[torch.dtype, ...]]
    """Model dtypes this platform can run, best first; the first is `--dtype auto`."""

    supports_graph_capture: ClassVar[bool] = False
    """Whether decode steps can be captured as device graphs (see `graph_capture`)."""

    graphs_hold_collectives: bool = False
    """Whether a graph may capture the collective backend's all-reduce, so that the decode
    steps of tensor parallelism replay from graphs too (every rank captures the same graphs
    in the same order, and replays them step by step with the others)."""

    executes_asynchronously: ClassVar[bool] = False
    """Whether kernels run from a queue behind the host's back, so that the host can
    prepare step N+1 while the device computes step N (torch.Event and pinned memory work)."""

    supports_async_scheduling: ClassVar[bool] = True
    """Whether steps may overlap at all (`--async-scheduling`): the model runner then fills
    in tokens still in flight (the scheduler's placeholders) on the device."""

    samples_on_host: ClassVar[bool] = False
    """Whether the model runner copies each step's logits to the host and samples there
    (where the sampler's data-dependent shapes would cost a compilation per step)."""

    uses_inference_mode: ClassVar[bool] = True
    """Whether steps run under `torch.inference_mode` (else `torch.no_grad`: devices whose
    in-place cache writes need tensors' version counters, as XLA's do)."""

    distributed_backend: ClassVar[str]
    """torch.distributed backend between devices of this platform (gloo, nccl, ...)."""

    ray_resource: ClassVar[str | None] = None
    """The Ray resource one device of this platform is ("GPU", "CPU", "TPU", ...), for the
    ray executor's placement group; None: the platform does not run on Ray."""

    preferred_attention_backends: ClassVar[tuple[str, ...]] = ()
    """Attention backend names in order of preference; the registry fills in the rest."""

    executor: ClassVar[str] = "uniproc"
    """Executor name used when the user asks for none."""

    worker: ClassVar[str] = "pagoda.worker.worker:Worker"
    """The `Worker` class that owns one device of this platform."""

    @property
    def default_dtype(self) -> torch.dtype:
        return self.supported_dtypes[0]

    def model_dtype(self, requested: torch.dtype | None, hf_config: Any) -> torch.dtype:
        """The dtype a model runs in here: `requested`; or (None: "auto") the checkpoint's
        own dtype where this platform runs it, else `default_dtype`. ValueError when the
        platform cannot run it."""
        dtype = requested
        if dtype is None:
            declared = getattr(hf_config, "dtype", None) or getattr(hf_config, "torch_dtype",
                                                                    None)
            if isinstance(declared, str):
                declared = getattr(torch, declared, None)
            dtype = declared if declared in self.supported_dtypes else self.default_dtype
        if dtype not in self.supported_dtypes:
            raise ValueError(f"dtype {dtype} is not supported on {self.name!r} "
                             f"(supported: {self.supported_dtypes})")
        return dtype

    def keeps_gguf_quantized(self, dtype: torch.dtype) -> bool:
        """Whether a GGUF's Q4_0/Q4_1/Q8_0 weights stay quantized (quantization "gguf")
        when the user names no quantization: where this platform's `woq_linear` on them
        is the faster path in `dtype` (decode, which reads every weight each token, above
        all). `--quantization none` still asks for dense weights."""
        return False

    def quantized_head_max_rows(self, dtype: torch.dtype) -> int:
        """Rows up to which an LM head holding its vocabulary table both quantized (a GGUF's
        tied table, `ParallelLMHead.keep_quantized`) and dense runs a step on the quantized
        one through `woq_linear`, for activations of `dtype`. A few rows are bound by
        reading the table, of which the codes are a quarter or a half; more are bound by
        the multiply-adds, where a kernel that dequantizes the codes per call does that
        work on top of the dense matmul's."""
        return DEFAULT_QUANTIZED_HEAD_MAX_ROWS

    @abstractmethod
    def device_count(self) -> int:
        """Number of devices of this platform visible to the process."""

    @abstractmethod
    def device_name(self, index: int = 0) -> str:
        """Human-readable name of a device (e.g. the CPU model)."""

    @abstractmethod
    def memory_info(self, index: int = 0) -> MemoryInfo:
        """Total and currently available memory of a device."""

    def default_kv_cache_bytes(self, memory: MemoryInfo) -> int:
        """KV cache size when the user sets none: half the memory available for it.

        `memory` is measured after the model is loaded, with the largest step's
        activations (from a profiling pass, where the platform tracks peaks) taken out.
        """
        return memory.available // 2

    def peak_memory_bytes(self, index: int = 0) -> int | None:
        """Peak bytes the process allocated on the device since the last reset, or None
        where the platform does not track it (then no profiling pass is run)."""
        return None

    def reset_peak_memory(self, index: int = 0) -> None:
        """Start a new peak measurement for `peak_memory_bytes`."""

    def graph_capture(self) -> GraphCapture | None:
        """This device's graph capture, when `supports_graph_capture`."""
        return None

    def step_padding(self, limits: StepShape) -> StepPadding | None:
        """How the model runner pads steps to static shapes, for an engine whose largest
        step is `limits`; None (the default): every step runs at its own shape. Raise
        ValueError when the limits do not fit the platform's shapes."""
        return None

    def fuse_decode_layer(self, spec: DecodeLayerSpec) -> FusedDecodeLayer | None:
        """A decoder layer's decode step in two calls around its attention, from its parts
        (`pagoda.models.decode_fusion`); None (the default): the layer runs op by op."""
        return None

    def after_forward(self) -> None:
        """Called by the model runner once a step's forward pass and logits are issued,
        before anything reads them; a device that traces steps lazily runs them here."""

    def torch_device(self, index: int = 0) -> torch.device:
        """The torch device for device `index`."""
        return torch.device(self.device_type, index)

    def synchronize(self, index: int = 0) -> None:
        """Wait for queued work on the device (no-op for synchronous devices)."""

    def set_device(self, index: int) -> None:
        """Make device `index` current for this process (multi-device workers)."""

    def init_worker(self, local_rank: int, local_world_size: int) -> None:
        """Prepare this process to drive device `local_rank`, one of `local_world_size`
        worker processes on this host; the default makes that device current."""
        self.set_device(local_rank)

    def describe(self) -> dict[str, object]:
        """Capabilities as plain data, for `pagoda plugins` and start-up logs."""
        return {
            "name": self.name,
            "device_type": self.device_type,
            "devices": [self.device_name(i) for i in range(self.device_count())],
            "supported_dtypes": [str(d).removeprefix("torch.") for d in self.supported_dtypes],
            "supports_graph_capture": self.supports_graph_capture,
            "distributed_backend": self.distributed_backend,
            "preferred_attention_backends": list(self.preferred_attention_backends),
            "executor": self.executor,
        }
