"""Engine configuration: what the user asked for, validated, before anything loads.

Each leaf field is one option under its own name everywhere: `LLM(name=...)`,
`EngineConfig.from_kwargs(name=...)` and `--name` on the command line; the docstring after
it is its help text (pagoda.config.fields, pagoda.cli.dataclass_args).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pagoda.config.fields import check_choices, from_flat
from pagoda.config.values import ByteSize, dtype_name, kv_cache_dtype_name, read_chat_template
from pagoda.platforms.selection import choose_device
from pagoda.plugins import get_registries


@dataclass
class ModelConfig:
    """The model, its tokenizer and how its weights load."""

    model: str | None = None
    """HF directory, .gguf file, hub id or bundled name; None: the embedded
    SmolLM2-135M-Instruct."""
    tokenizer: str | None = None
    """Tokenizer directory or hub id, if not the model's."""
    dtype: str = "auto"
    """Weights and activations: auto (the platform's choice for the model), float32,
    bfloat16 or float16 (in Python also a torch.dtype)."""
    load_format: Literal["auto", "safetensors", "gguf", "dummy"] = "auto"
    """How to read the weights; dummy: random weights of the model's shapes (benchmarks)."""
    max_model_len: int | None = None
    """Longest prompt plus output, in tokens; None: the model's context length."""
    seed: int = 0
    """Random seed: sampling without a per-request seed, dummy weights, benchmark prompts."""
    served_model_name: list[str] | None = None
    """Names clients use for the model (in Python also one name); the first is the one
    responses report. None: the model's name."""
    generation_config: Literal["auto", "pagoda"] = "auto"
    """auto: sampling defaults from the model's generation_config.json; pagoda: ours only."""
    chat_template: str | None = None
    """A Jinja chat template, or a file holding one; None: the tokenizer's."""
    quantization: str | None = None
    """Quantization method. None: what the checkpoint's quantization_config says
    (compressed-tensors, fp8, gptq, awq), else dense weights (a GGUF's dequantized, unless
    the platform runs them faster kept quantized: the CPU's native kernels in float32);
    none: dense weights;
    fp8, int8, int4: quantize a dense checkpoint at load (FP8 or INT8 weights and
    activations, or 4-bit weights); gguf: keep a GGUF's Q4_0/Q4_1/Q8_0 weights quantized;
    gguf_a8: the same with the activations rounded to int8 blocks of 32 as llama.cpp rounds
    them (its numerics; on the CPU faster one-row matmuls, summed in integers)."""
    runner: Literal["auto", "generate", "pooling"] = "auto"
    """generate: text; pooling: embeddings and relevance scores (LLM.embed and LLM.score,
    /v1/embeddings, /v1/score, /v1/rerank). auto: what the architecture is (BertModel,
    BertForSequenceClassification and decoders saved without their LM head, e.g.
    Qwen3Model, pool; a *ForCausalLM generates), except that a causal LM shipped as a
    sentence-transformers model (modules.json) pools."""
    model_impl: Literal["auto", "pagoda", "transformers"] = "auto"
    """Which implementation runs the model: pagoda (its own class for the architecture),
    transformers (HF transformers' modeling code with Pagoda's paged attention, KV cache,
    scheduler and sampler; one device, unquantized weights), or auto (pagoda where it has
    the architecture, else transformers)."""

    def __post_init__(self) -> None:
        check_choices(self)
        self.dtype = dtype_name(self.dtype)
        if self.max_model_len is not None and self.max_model_len < 1:
            raise ValueError(f"max_model_len must be >= 1, got {self.max_model_len}")
        if isinstance(self.served_model_name, str):
            self.served_model_name = [self.served_model_name]
        if self.chat_template is not None:
            self.chat_template = read_chat_template(self.chat_template)


@dataclass
class PoolerConfig:
    """How a pooling model turns a prompt's hidden states into one embedding."""

    pooling: Literal["mean", "cls", "last"] | None = None
    """mean over the prompt's tokens, its first (cls) or its last token. None: what the
    checkpoint's sentence-transformers Pooling module says, else the model's own (last for
    a decoder, mean for an encoder, as sentence-transformers builds one)."""
    normalize_embeddings: bool | None = None
    """Scale each embedding to unit length. None: where the checkpoint has a
    sentence-transformers Normalize module, else the model's own (yes for a decoder, no for
    an encoder)."""

    def __post_init__(self) -> None:
        check_choices(self)


@dataclass
class CacheConfig:
    """The paged KV cache: block size, how much memory, prefix caching."""

    block_size: int = 16
    """Tokens per KV cache block (a power of two)."""
    kv_cache_memory: ByteSize | None = None
    """KV cache size in bytes (e.g. 2GiB); None: memory_fraction of the free memory, or the
    platform's default when that is None too."""
    memory_fraction: float | None = None
    """Fraction of the device's free memory (after loading) for the KV cache; None: the
    platform's choice."""
    gpu_memory_utilization: float | None = None
    """Fraction of the device's total memory this engine may fill: weights, the largest
    step's activations (measured by a profiling pass), the KV cache; None: the platform's
    default (0.9 on GPUs)."""
    kv_cache_dtype: str = "auto"
    """KV cache dtype: auto (the model's dtype), float32, bfloat16, float16, or fp8 (alias
    fp8_e4m3: e4m3 values with a scale per layer for keys and for values, from the
    checkpoint or 1.0; half the bytes of a 16-bit cache, so twice the blocks)."""
    enable_prefix_caching: bool = True
    """Reuse the KV cache blocks of prompt prefixes seen before."""
    num_kv_blocks: int | None = None
    """Exact number of KV cache blocks (tests, benchmarks); overrides the memory settings."""

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
        if self.num_kv_blocks is not None and self.num_kv_blocks < 1:
            raise ValueError(f"num_kv_blocks must be >= 1, got {self.num_kv_blocks}")
        self.kv_cache_dtype = kv_cache_dtype_name(self.kv_cache_dtype)


@dataclass
class SchedulerConfig:
    """What each step runs: the batch limits and the order of the waiting requests."""

    max_num_seqs: int = 256
    """Most sequences in one step."""
    max_num_batched_tokens: int = 2048
    """Most tokens in one step: the step's token budget."""
    scheduling_policy: Literal["fcfs", "priority"] = "fcfs"
    """fcfs: first come, first served; priority: lower priority value first, then
    arrival."""
    enable_chunked_prefill: bool = True
    """Split a prompt longer than the token budget across steps."""
    async_scheduling: bool | None = None
    """Schedule step N+1 while the device runs step N; None: where the platform's device
    runs asynchronously from the host."""
    max_waiting_requests: int | None = None
    """Most requests that may wait for a place beside the max_num_seqs running ones (per
    engine core); more are refused at once (the server answers 503 with Retry-After)
    instead of queueing without bound. None: no bound."""

    def __post_init__(self) -> None:
        check_choices(self)
        if self.max_num_seqs < 1:
            raise ValueError(f"max_num_seqs must be >= 1, got {self.max_num_seqs}")
        if self.max_waiting_requests is not None and self.max_waiting_requests < 0:
            raise ValueError(f"max_waiting_requests must be >= 0 or None, got "
                             f"{self.max_waiting_requests}")
        if self.max_num_batched_tokens < 1:
            raise ValueError(
                f"max_num_batched_tokens must be >= 1, got {self.max_num_batched_tokens}"
            )


@dataclass
class ParallelConfig:
    """How the model is spread over devices."""

    tensor_parallel_size: int = 1
    """Devices each layer is split across (attention heads, MLP features, vocabulary), one
    worker process each; above 1 the executor defaults to mp."""
    pipeline_parallel_size: int = 1
    """Stages the model's layers are split into, each on tensor_parallel_size devices;
    as many batches are in flight, one per stage. Above 1 the executor defaults to mp."""
    data_parallel_size: int = 1
    """Engine cores, each with its own copy of the model (on tensor_parallel_size x
    pipeline_parallel_size devices), KV cache and scheduler, behind one front end that
    spreads requests over them (the server; LLM runs one)."""
    enable_expert_parallel: bool = False
    """Mixture-of-experts layers: each tensor-parallel rank holds num_experts /
    tensor_parallel_size whole experts and runs the tokens routed to them, instead of a
    slice of every expert."""

    def __post_init__(self) -> None:
        for name in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")

    @property
    def world_size(self) -> int:
        """Workers (devices) of one engine core."""
        return self.tensor_parallel_size * self.pipeline_parallel_size

    @property
    def num_devices(self) -> int:
        """Devices of all engine cores together."""
        return self.data_parallel_size * self.tensor_parallel_size


@dataclass
class SpeculativeConfig:
    """Speculative decoding: tokens proposed cheaply, then verified in one step of the
    model, so a request may gain several tokens a step; outputs are distributed as without
    it (greedy ones are the same tokens)."""

    speculative_method: Literal["ngram", "draft"] | None = None
    """ngram: propose the tokens that followed the latest earlier occurrence of the
    request's last n tokens in its prompt and output (prompt lookup); draft: a smaller
    model sharing the vocabulary (speculative_model) proposes them; None: off. Requests
    with a grammar, a thinking budget, penalties, bad words or logprobs do not speculate."""
    num_speculative_tokens: int = 3
    """Tokens proposed (and verified) per request and step."""
    prompt_lookup_min: int = 1
    """Shortest n-gram looked up (ngram)."""
    prompt_lookup_max: int = 4
    """Longest n-gram looked up, tried first (ngram)."""
    speculative_model: str | None = None
    """The draft model (draft): an HF directory, .gguf file or hub id of any architecture
    served, with the target's vocabulary; loaded like the model (load_format applies)."""
    speculative_dtype: str | None = None
    """The draft model's dtype (see dtype); None: the model's."""
    speculative_quantization: str | None = None
    """The draft model's quantization (see quantization); None: the model's."""
    speculative_disable_by_batch_size: int | None = None
    """Steps that start with more running requests than this propose no drafts: once a
    step holds many requests its matmuls are busy, and verifying drafts costs more than
    they save; None: every step speculates."""

    def __post_init__(self) -> None:
        check_choices(self)
        if self.num_speculative_tokens < 1:
            raise ValueError(f"num_speculative_tokens must be >= 1, got "
                             f"{self.num_speculative_tokens}")
        if not 1 <= self.prompt_lookup_min <= self.prompt_lookup_max:
            raise ValueError(f"prompt_lookup_min and prompt_lookup_max must satisfy 1 <= "
                             f"min <= max, got {self.prompt_lookup_min} and "
                             f"{self.prompt_lookup_max}")
        if (self.speculative_method == "draft") != (self.speculative_model is not None):
            raise ValueError("speculative_model: needed by speculative_method draft, and "
                             f"only by it (method {self.speculative_method!r}, model "
                             f"{self.speculative_model!r})")
        if self.speculative_dtype is not None:
            self.speculative_dtype = dtype_name(self.speculative_dtype)
        limit = self.speculative_disable_by_batch_size
        if limit is not None and (limit < 1 or self.speculative_method is None):
            raise ValueError(f"speculative_disable_by_batch_size must be >= 1 and needs "
                             f"speculative_method, got {limit} (method "
                             f"{self.speculative_method!r})")


@dataclass
class LoRAConfig:
    """LoRA adapters (PEFT) served beside the base model: a request names its adapter (or
    none), and requests of different adapters share a step."""

    enable_lora: bool = False
    """Serve LoRA adapters of the attention and MLP projections."""
    max_loras: int = 1
    """Adapters on the device at once (its slots), so also the most distinct adapters in
    one step; requests for others wait."""
    max_lora_rank: int = 16
    """Largest adapter rank accepted (slots are this wide)."""
    max_cpu_loras: int | None = None
    """Adapters kept in host memory, least recently used dropped first; None: max_loras."""

    def __post_init__(self) -> None:
        for name in ("max_loras", "max_lora_rank"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_cpu_loras is not None and self.max_cpu_loras < self.max_loras:
            raise ValueError(f"max_cpu_loras ({self.max_cpu_loras}) must be >= max_loras "
                             f"({self.max_loras})")


@dataclass
class EngineConfig:
    """Everything an engine needs to know before it loads; its leaf fields are the options
    of `LLM(...)` and of the commands that build an engine."""

    model: ModelConfig = field(default_factory=ModelConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    pooler: PoolerConfig = field(default_factory=PoolerConfig)
    speculative: SpeculativeConfig = field(default_factory=SpeculativeConfig)
    lora: LoRAConfig = field(default_factory=LoRAConfig)
    device: str | None = None
    """Platform name or auto (the best usable one); None: PAGODA_DEVICE, else auto. Holds
    the chosen platform's name once the config is built."""
    attention_backend: str | None = None
    """Attention backend by name; None: the platform's best one for the model."""
    distributed_executor_backend: str | None = None
    """The executor by name: uniproc (the worker in the engine-core process), mp (a worker
    process per device) or ray (a Ray actor per device, on a Ray cluster: RAY_ADDRESS, else
    one started on this host); None: mp for several devices, else the platform's."""
    enforce_eager: bool = False
    """Launch every kernel from Python: no device graphs for decode (or verify) steps."""
    graph_batch_sizes: list[int] | None = None
    """Decode batch sizes captured as device graphs (e.g. 1,2,4,8); None: 1, 2, 4, 8, ...
    up to max_num_seqs. With speculative decoding, steps verifying drafts for as many
    sequences are captured too. Only on platforms that support graph capture."""

    def __post_init__(self) -> None:
        if self.graph_batch_sizes is not None and (
            not self.graph_batch_sizes or min(self.graph_batch_sizes) < 1
        ):
            raise ValueError(f"graph_batch_sizes must be positive integers, got "
                             f"{self.graph_batch_sizes}")
        if self.speculative.speculative_method is not None and self.model.runner == "pooling":
            raise ValueError("speculative_method: a pooling model (runner pooling) generates "
                             "no tokens to speculate on")
        if self.lora.enable_lora and self.model.runner == "pooling":
            raise ValueError("enable_lora: LoRA adapters are served for generating models, "
                             "not pooling ones (runner pooling)")
        self.device = choose_device(self.device, get_registries())

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> EngineConfig:
        """The config from flat options, one per leaf field (`max_num_seqs=64`,
        `device="cpu"`, ...); TypeError for an unknown one, naming the closest."""
        return from_flat(cls, kwargs)
