"""The core's own registrations, made through the same hooks as any plugin."""

from __future__ import annotations

from pagoda.plugins.hookspecs import PLUGIN_API_VERSION, hookimpl
from pagoda.plugins.specs import (
    CORE_OPS,
    OPTIONAL_OPS,
    AttentionBackendSpec,
    CliCommandSpec,
    ExecutorSpec,
    KernelProvider,
    ModelArchSpec,
    PluginInfo,
    QuantMethodSpec,
)
from pagoda.version import __version__

# HF architecture name -> model class. Every dense family is the shared decoder
# (`pagoda.models.decoder`) with its own reading of the config; Llama, Mistral, Qwen2 and
# Qwen3 share one class, their differences (qkv bias, q/k norm, sliding window) being config.
_DECODER = "pagoda.models.llama:LlamaForCausalLM"
MODEL_ARCHITECTURES = {
    "LlamaForCausalLM": _DECODER,
    "MistralForCausalLM": _DECODER,
    "Qwen2ForCausalLM": _DECODER,
    "Qwen3ForCausalLM": _DECODER,
    "MixtralForCausalLM": "pagoda.models.moe:MixtralForCausalLM",
    "Qwen2MoeForCausalLM": "pagoda.models.moe:MoeForCausalLM",
    "Qwen3MoeForCausalLM": "pagoda.models.moe:MoeForCausalLM",
    "Gemma2ForCausalLM": "pagoda.models.gemma:Gemma2ForCausalLM",
    "Gemma3ForCausalLM": "pagoda.models.gemma:Gemma3ForCausalLM",
    "Phi3ForCausalLM": "pagoda.models.phi3:Phi3ForCausalLM",
    "BertModel": "pagoda.models.bert:BertModel",
    "BertForSequenceClassification": "pagoda.models.bert:BertForSequenceClassification",
}

DECODER_EMBEDDING_ARCHITECTURES = {
    "LlamaModel": _DECODER,
    "MistralModel": _DECODER,
    "Qwen2Model": _DECODER,
    "Qwen3Model": _DECODER,
}
"""Decoders saved without their LM head (an embedding model's checkpoint): the causal LM's
class, run as a pooling model (`pagoda.models.pooling_adapter`)."""


QUANT_METHODS = {
    "none": "pagoda.quant.unquantized:UnquantizedMethod",
    "compressed-tensors": "pagoda.quant.compressed_tensors:CompressedTensorsMethod",
    "fp8": "pagoda.quant.formats:Fp8Method",
    "gptq": "pagoda.quant.formats:GptqMethod",
    "awq": "pagoda.quant.formats:AwqMethod",
    "int8": "pagoda.quant.formats:Int8Method",
    "int4": "pagoda.quant.formats:Int4Method",
    "gguf": "pagoda.quant.gguf:GGUFMethod",
    "gguf_a8": "pagoda.quant.gguf:GGUFA8Method",
}
"""Quantization methods by name: a checkpoint's `quant_method`, or `--quantization`."""


@hookimpl
def pagoda_plugin_info() -> PluginInfo:
    return PluginInfo("core", __version__, PLUGIN_API_VERSION, "Pagoda core", package="pagoda",
                      verified_on="no hardware of its own; its reference kernels run in CI "
                                  "on x86-64 CPUs")


@hookimpl
def pagoda_attention_backends() -> list[AttentionBackendSpec]:
    return [
        AttentionBackendSpec(
            "reference", "pagoda.attention.reference:ReferenceAttentionBackend", priority=-100
        )
    ]


@hookimpl
def pagoda_quant_methods() -> list[QuantMethodSpec]:
    # Where each runs is decided per layer by the quantized-linear op it needs
    # (`QUANT_OPS`): a platform offers a scheme by registering that op's kernel.
    return [QuantMethodSpec(name, target) for name, target in QUANT_METHODS.items()]


@hookimpl
def pagoda_executors() -> list[ExecutorSpec]:
    return [ExecutorSpec("uniproc", "pagoda.executor.uniproc:UniProcExecutor"),
            ExecutorSpec("mp", "pagoda.executor.multiproc:MultiprocExecutor"),
            ExecutorSpec("ray", "pagoda.executor.ray_executor:RayExecutor")]


@hookimpl
def pagoda_kernel_providers() -> list[KernelProvider]:
    # Named lazily: discovery (and so every `pagoda` command) must not import torch. The
    # optional ops (the quantized linears, the ops quantizing their inputs) have no
    # fallback: a platform offers them with providers of its own.
    return [KernelProvider(op, "reference", f"pagoda.ops.reference:{op}", priority=-1000)
            for op in CORE_OPS if op not in OPTIONAL_OPS]


@hookimpl
def pagoda_model_architectures() -> list[ModelArchSpec]:
    return [*(ModelArchSpec(arch, target) for arch, target in MODEL_ARCHITECTURES.items()),
            *(ModelArchSpec(arch, target, runner="pooling")
              for arch, target in DECODER_EMBEDDING_ARCHITECTURES.items())]


@hookimpl
def pagoda_cli_subcommands() -> list[CliCommandSpec]:
    return [
        CliCommandSpec(
            "plugins",
            "list installed plugins, their devices, backends and kernels",
            "pagoda.cli.plugins_cmd:add_arguments",
            "pagoda.cli.plugins_cmd:run",
        ),
        CliCommandSpec(
            "collect-env",
            "print the environment (OS, Python, torch, pagoda packages, devices)",
            "pagoda.cli.collect_env:add_arguments",
            "pagoda.cli.collect_env:run",
        ),
        CliCommandSpec(
            "bench",
            "benchmark offline throughput or latency, side by side with HF transformers",
            "pagoda.bench.cli:add_arguments",
            "pagoda.bench.cli:run",
        ),
    ]
