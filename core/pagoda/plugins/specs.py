"""The plain data a plugin's hooks return. Nothing here imports heavy code."""

from __future__ import annotations

from dataclasses import dataclass, field

from pagoda.plugins.lazy import Target

ANY_PLATFORM = "*"

CORE_OPS = (
    "linear",
    "rms_norm",
    "fused_add_rms_norm",
    "fused_add_rms_norm_quant",
    "rotary_embedding",
    "silu_and_mul",
    "silu_and_mul_quant",
    "gelu_and_mul",
    "sample_from_logits",
    "apply_token_bitmask",
    "all_reduce",
    "fp8_linear",
    "int8_linear",
    "woq_linear",
    "fused_moe",
    "layer_norm",
    "gelu",
    "encoder_attention",
    "lora_shrink",
    "lora_expand",
)
"""The ops core declares (their meaning: `pagoda.ops.reference`); KernelProvider.op is one.
Attention over the paged KV cache is not an op: a platform provides it as an
`AttentionBackend`. `encoder_attention` (an encoder's bidirectional attention within each
prompt, no cache) is one."""

QUANT_OPS = ("fp8_linear", "int8_linear", "woq_linear")
"""The quantized linears (FP8 and INT8 weights and activations, weight-only integer
groups): ops a platform offers only by registering a provider. Core registers no fallback
for them, so a quantization scheme runs exactly where some platform says it can."""

QUANT_INPUT_OPS = ("fused_add_rms_norm_quant", "silu_and_mul_quant")
"""Ops that produce a W8A8 linear's input already quantized per token (a
`pagoda.quant.tensors.QuantizedActivation`), so that it is not written in the model's dtype
and read back to be quantized: optional, as the quantized linears are. A layer uses one
only where the linear's provider takes such an input (`KernelProvider.quantized_input`)."""

OPTIONAL_OPS = (*QUANT_OPS, *QUANT_INPUT_OPS)
"""The ops a platform need not offer."""

RETIRED_OPS = {
    "reshape_and_cache": "plugin API 3: attention (KV cache writes included) is an "
                         "AttentionBackend, not an op",
    "paged_attention": "plugin API 3: attention is an AttentionBackend, not an op",
}
"""Ops core no longer declares, and why; providers of them are dropped at discovery."""


@dataclass(frozen=True)
class PluginInfo:
    """Who a plugin is and which plugin API it was built against.

    Plugin API 2 added `package` (the distribution that installs the plugin, e.g.
    "pagoda-cpu") and `verified_on` (a short, honest statement of the hardware the plugin
    has actually run on, e.g. "x86-64 CPUs (CI)"). A plugin declaring API 2 or later must
    fill both; an API 1 plugin leaves them None and is listed as "unknown".
    """

    name: str
    version: str
    api_version: int
    description: str = ""
    package: str | None = field(default=None, kw_only=True)
    verified_on: str | None = field(default=None, kw_only=True)


@dataclass(frozen=True)
class PlatformProbe:
    """A cheap answer to "can this platform run here?", made without importing a vendor SDK.

    `devices` describes the usable devices (e.g. "NVIDIA H200 (141 GiB)"); `reason` says why
    the platform is unusable when `usable` is false. The highest `score` wins `--device auto`.
    `visible_devices_env` names the environment variables that choose which devices the
    platform sees (e.g. CUDA_VISIBLE_DEVICES), for `pagoda collect-env`.
    """

    name: str
    usable: bool
    score: int = 0
    devices: tuple[str, ...] = ()
    reason: str | None = None
    visible_devices_env: tuple[str, ...] = field(default=(), kw_only=True)


@dataclass(frozen=True)
class AttentionBackendSpec:
    """An attention backend class (`AttentionBackend` subclass) and where it may run."""

    name: str
    backend: Target
    platforms: tuple[str, ...] = (ANY_PLATFORM,)
    priority: int = 0


@dataclass(frozen=True)
class QuantMethodSpec:
    """A quantization method class (`QuantMethod` subclass) and where it may run."""

    name: str
    method: Target
    platforms: tuple[str, ...] = (ANY_PLATFORM,)
    priority: int = 0


@dataclass(frozen=True)
class ExecutorSpec:
    """An executor class (`Executor` subclass)."""

    name: str
    executor: Target
    priority: int = 0


@dataclass(frozen=True)
class KernelProvider:
    """One implementation of a core op.

    `impl` has the op's reference signature. `is_available()` (optional) returns None when the
    provider can run in this process, else the reason it cannot. `supports(**static_args)`
    (optional) says whether it handles the arguments known at setup (dtype, head size ...).
    `prepare(weight, dtype)` (optional, quantized linears) turns the canonical quantized
    weight into what `impl` takes in its place (a kernel's own layout) for activations of
    `dtype` (the model's), once per layer at load. `quantized_input(weight, rows)`
    (optional, fp8_linear and int8_linear) says whether `impl` takes x of `rows` rows
    already quantized per token (a `QuantizedActivation` of the op's code type, from an op
    of QUANT_INPUT_OPS) for `prepare`'s weight: where it says so, a layer may hand it one.
    Without it the op is always given x in the model's dtype.
    """

    op: str
    name: str
    impl: Target
    platforms: tuple[str, ...] = (ANY_PLATFORM,)
    priority: int = 0
    is_available: Target | None = None
    supports: Target | None = None
    prepare: Target | None = None
    quantized_input: Target | None = None


@dataclass(frozen=True)
class ModelArchSpec:
    """A model class for an HF `architectures` name.

    `runner` ("generate" or "pooling") is what the name means where the class can do both:
    "Qwen3Model" names the decoder of Qwen3ForCausalLM without its LM head, an embedding
    model. None: the class's own (`runner` class attribute; "generate" without one).
    """

    architecture: str
    model: Target
    priority: int = 0
    runner: str | None = None


@dataclass(frozen=True)
class CliCommandSpec:
    """A `pagoda` subcommand: `add_arguments(parser)` then `run(args) -> exit code`."""

    name: str
    help: str
    add_arguments: Target
    run: Target
    aliases: tuple[str, ...] = field(default=())
