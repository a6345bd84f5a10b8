"""The Llama-family decoder: Llama, Mistral, Qwen2 and Qwen3 in one implementation.

Their differences are config: qkv bias (Qwen2), per-head q/k RMSNorm before rotary (Qwen3),
head_dim != hidden / heads, sliding-window layers (Mistral, Qwen2/3), tied embeddings,
attention_bias / mlp_bias.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

from pagoda.attention import AttentionBackend, AttentionMetadata, KVCacheSpec
from pagoda.distributed import pp_group
from pagoda.models.layers import (
    Attention,
    ParallelLMHead,
    QKVParallelLinear,
    RMSNorm,
    RotaryEmbedding,
    RowParallelLinear,
    SiluMLP,
    VocabParallelEmbedding,
    get_rotary_embedding,
)
from pagoda.models.weights import load_checkpoint_weights
from pagoda.quant import QuantMethod

if TYPE_CHECKING:
    from transformers import PretrainedConfig

# What HF hard-codes per family instead of writing it in config.json.
_QKV_BIAS_BY_DEFAULT = ("qwen2", "qwen2_moe")
_QK_NORM = ("qwen3", "qwen3_moe")


@dataclass(frozen=True)
class DecoderSpec:
    """The config facts one decoder layer is built from."""

    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_size: int
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool
    qk_norm: bool

    @classmethod
    def from_config(cls, config: PretrainedConfig) -> DecoderSpec:
        num_heads, num_kv_heads, head_size, _ = attention_shape(config)
        model_type = getattr(config, "model_type", "")
        attention_bias = getattr(config, "attention_bias", None)
        qkv_bias = getattr(config, "qkv_bias", None)  # Qwen2-MoE's own name for it
        return cls(
            hidden_size=config.hidden_size,
            num_heads=num_heads,
            num_kv_heads=num_kv_heads,
            head_size=head_size,
            qkv_bias=bool(qkv_bias) if qkv_bias is not None else (
                bool(attention_bias)
                or (attention_bias is None and model_type in _QKV_BIAS_BY_DEFAULT)),
            o_bias=bool(attention_bias),
            mlp_bias=bool(getattr(config, "mlp_bias", False)),
            qk_norm=model_type in _QK_NORM,
        )


def layer_sliding_windows(config: PretrainedConfig) -> list[int | None]:
    """Each layer's sliding window (None: full attention).

    HF `layer_types` marks sliding layers (Qwen2/3); without it a set `sliding_window`
    applies to every layer (Mistral) unless `use_sliding_window` is false.
    """
    window = getattr(config, "sliding_window", None)
    num_layers = config.num_hidden_layers
    if window is None or getattr(config, "use_sliding_window", True) is False:
        return [None] * num_layers
    layer_types = getattr(config, "layer_types", None)
    if layer_types is None:
        return [window] * num_layers
    return [window if kind == "sliding_attention" else None for kind in layer_types]


def attention_shape(config: PretrainedConfig) -> tuple[int, int, int, int | None]:
    """(num_heads, num_kv_heads, head_size, sliding_window) for choosing a backend.

    sliding_window is set when any layer uses one.
    """
    num_heads = config.num_attention_heads
    num_kv_heads = getattr(config, "num_key_value_heads", None) or num_heads
    head_size = getattr(config, "head_dim", None) or config.hidden_size // num_heads
    windows = [w for w in layer_sliding_windows(config) if w is not None]
    return num_heads, num_kv_heads, head_size, max(windows) if windows else None


FeedForward = Callable[..., nn.Module]
"""Builds decoder layer `index`'s feed-forward block, a module from hidden states [T, H] to
[T, H]: (config, spec, index, *, dtype, quant_method, prefix) -> module."""


def dense_feed_forward(config: PretrainedConfig, spec: DecoderSpec, index: int, *,
                       dtype: torch.dtype, quant_method: QuantMethod | None,
                       prefix: str) -> nn.Module:
    """The gated SiLU MLP every layer of the dense families has."""
    return SiluMLP(spec.hidden_size, config.intermediate_size, bias=spec.mlp_bias, dtype=dtype,
                   quant_method=quant_method, prefix=prefix)


class LlamaAttention(nn.Module):
    def __init__(
        self,
        config: PretrainedConfig,
        spec: DecoderSpec,
        rotary: RotaryEmbedding,
        *,
        sliding_window: int | None,
        dtype: torch.dtype,
        attn_backend: type[AttentionBackend],
        quant_method: QuantMethod | None,
        prefix: str,
    ):
        super().__init__()
        self.qkv_proj = QKVParallelLinear(
            spec.hidden_size, spec.head_size, spec.num_heads, spec.num_kv_heads,
            bias=spec.qkv_bias, dtype=dtype, quant_method=quant_method,
            prefix=f"{prefix}.qkv_proj",
        )
        heads = self.qkv_proj.heads  # this rank's
        self.num_heads, self.num_kv_heads = heads.local_heads, heads.local_kv_heads
        self.head_size = spec.head_size
        self.o_proj = RowParallelLinear(
            spec.num_heads * spec.head_size, spec.hidden_size,
            bias=spec.o_bias, dtype=dtype, quant_method=quant_method, prefix=f"{prefix}.o_proj",
        )
        eps = config.rms_norm_eps
        self.q_norm = RMSNorm(spec.head_size, eps, dtype=dtype) if spec.qk_norm else None
        self.k_norm = RMSNorm(spec.head_size, eps, dtype=dtype) if spec.qk_norm else None
        self.rotary_emb = rotary
        self.attn = Attention(
            self.num_heads, spec.head_size, self.num_kv_heads,
            attn_backend=attn_backend, sliding_window=sliding_window,
        )

    def forward(
        self,
        positions: torch.Tensor,
        hidden_states: torch.Tensor,
        kv_cache: torch.Tensor,
        attn_metadata: AttentionMetadata,
    ) -> torch.Tensor:
        num_tokens = hidden_states.shape[0]
        q, k, v = self.qkv_proj.split(self.qkv_proj(hidden_states))
        q = q.view(num_tokens, self.num_heads, self.head_size)
        k = k.view(num_tokens, self.num_kv_heads, self.head_size)
        v = v.view(num_tokens, self.num_kv_heads, self.head_size)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = self.rotary_emb(positions, q, k)
        return self.o_proj(self.attn(q, k, v, kv_cache, attn_metadata))


class LlamaDecoderLayer(nn.Module):
    def __init__(
        self,
        config: PretrainedConfig,
        spec: DecoderSpec,
        rotary: RotaryEmbedding,
        *,
        sliding_window: int | None,
        dtype: torch.dtype,
        attn_backend: type[AttentionBackend],
        quant_method: QuantMethod | None,
        prefix: str,
        index: int,
        feed_forward: FeedForward = dense_feed_forward,
    ):
        super().__init__()
        self.self_attn = LlamaAttention(
            config, spec, rotary, sliding_window=sliding_window, dtype=dtype,
            attn_backend=attn_backend, quant_method=quant_method, prefix=f"{prefix}.self_attn",
        )
        self.mlp = feed_forward(config, spec, index, dtype=dtype, quant_method=quant_method,
                                prefix=f"{prefix}.mlp")
        self.input_layernorm = RMSNorm(spec.hidden_size, config.rms_norm_eps, dtype=dtype)
        self.post_attention_layernorm = RMSNorm(
            spec.hidden_size, config.rms_norm_eps, dtype=dtype
        )

    def forward(
        self,
        positions: torch.Tensor,
        hidden_states: torch.Tensor,
        residual: torch.Tensor | None,
        kv_cache: torch.Tensor,
        attn_metadata: AttentionMetadata,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """-> (this layer's output, the residual stream before it is added)."""
        if residual is None:
            residual, hidden_states = hidden_states, self.input_layernorm(hidden_states)
        else:
            hidden_states, residual = self.input_layernorm.add_norm(hidden_states, residual)
        hidden_states = self.self_attn(positions, hidden_states, kv_cache, attn_metadata)
        hidden_states, residual = self.post_attention_layernorm.add_norm(hidden_states, residual)
        return self.mlp(hidden_states), residual


class LlamaModel(nn.Module):
    """The decoder stack; under pipeline parallelism, this rank's stage of it: its layers
    (the others are empty placeholders, so weight names keep their indices), the embedding
    on the first stage and the final norm on the last."""

    def __init__(
        self,
        config: PretrainedConfig,
        *,
        dtype: torch.dtype,
        attn_backend: type[AttentionBackend],
        quant_method: QuantMethod | None,
        feed_forward: FeedForward = dense_feed_forward,
    ):
        super().__init__()
        if getattr(config, "hidden_act", "silu") != "silu":
            raise ValueError(f"Unsupported hidden_act {config.hidden_act!r} (expected 'silu')")
        spec = DecoderSpec.from_config(config)
        rotary = get_rotary_embedding(config, spec.head_size)
        self.stage = pp_group()
        self.hidden_size, self.dtype = spec.hidden_size, dtype
        self.local_layers = self.stage.layers(config.num_hidden_layers)
        self.embed_tokens = (VocabParallelEmbedding(config.vocab_size, spec.hidden_size,
                                                    dtype=dtype)
                             if self.stage.is_first else None)
        self.layers = nn.ModuleList(
            LlamaDecoderLayer(
                config, spec, rotary, sliding_window=window, dtype=dtype,
                attn_backend=attn_backend, quant_method=quant_method,
                prefix=f"model.layers.{index}", index=index, feed_forward=feed_forward,
            ) if index in self.local_layers else nn.Identity()
            for index, window in enumerate(layer_sliding_windows(config))
        )
        self.norm = (RMSNorm(spec.hidden_size, config.rms_norm_eps, dtype=dtype)
                     if self.stage.is_last else None)
        # A plain list: run every step without building a ModuleList slice each time.
        self._stage_layers = list(self.layers)[self.local_layers.start:self.local_layers.stop]

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        kv_caches: list[torch.Tensor],
        attn_metadata: AttentionMetadata,
        intermediate: list[torch.Tensor] | None = None,
    ) -> torch.Tensor | list[torch.Tensor]:
        """The final hidden states on the last stage; elsewhere the [hidden, residual]
        streams for the next stage (`intermediate`: the previous stage's)."""
        if self.embed_tokens is not None:
            hidden_states, residual = self.embed_tokens(input_ids), None
        else:
            assert intermediate is not None, "a later stage starts from the previous one's"
            hidden_states, residual = intermediate
        for layer, kv_cache in zip(self._stage_layers, kv_caches, strict=True):
            hidden_states, residual = layer(
                positions, hidden_states, residual, kv_cache, attn_metadata
            )
        if self.norm is None:
            return [hidden_states, residual]
        return self.norm.add_norm(hidden_states, residual)[0]


class LlamaForCausalLM(nn.Module):
    """A causal LM over a flattened, mixed prefill + decode batch and a paged KV cache."""

    def __init__(
        self,
        config: PretrainedConfig,
        *,
        dtype: torch.dtype,
        attn_backend: type[AttentionBackend],
        quant_method: QuantMethod | None = None,
    ):
        super().__init__()
        self.config = config
        self.tie_word_embeddings = bool(getattr(config, "tie_word_embeddings", False))
        self.model = LlamaModel(config, dtype=dtype, attn_backend=attn_backend,
                                quant_method=quant_method, feed_forward=self.feed_forward(config))
        self.lm_head = (ParallelLMHead(config.vocab_size, config.hidden_size, dtype=dtype,
                                       tied_to=self.model.embed_tokens
                                       if self.tie_word_embeddings else None)
                        if self.model.stage.is_last else None)

    def feed_forward(self, config: PretrainedConfig) -> FeedForward:
        """What builds each decoder layer's feed-forward block (a subclass's hook)."""
        return dense_feed_forward

    @staticmethod
    def attention_shape(config: PretrainedConfig) -> tuple[int, int, int, int | None]:
        """(num_heads, num_kv_heads, head_size, sliding_window), before building the model."""
        return attention_shape(config)

    @property
    def num_attention_layers(self) -> int:
        """Attention layers of this stage (each needs a KV cache)."""
        return len(self.model.local_layers)

    def kv_cache_spec(self, block_size: int, kv_cache_dtype: torch.dtype) -> KVCacheSpec:
        """The paged KV cache layout each attention layer needs (this rank's heads)."""
        attention = self.model.layers[self.model.local_layers.start].self_attn
        return KVCacheSpec(block_size, attention.num_kv_heads, attention.head_size,
                           kv_cache_dtype)

    def intermediate_like(self, num_tokens: int, device: torch.device) -> list[torch.Tensor]:
        """Buffers for what the previous stage sends: the hidden and residual streams."""
        shape = (num_tokens, self.model.hidden_size)
        return [torch.empty(shape, dtype=self.model.dtype, device=device) for _ in range(2)]

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        kv_caches: list[torch.Tensor],
        attn_metadata: AttentionMetadata,
        intermediate: list[torch.Tensor] | None = None,
    ) -> torch.Tensor | list[torch.Tensor]:
        """input_ids, positions [T] -> final hidden states [T, hidden] (or, before the
        last stage, what the next stage takes)."""
        return self.model(input_ids, positions, kv_caches, attn_metadata, intermediate)

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """hidden states [N, hidden] -> float32 logits [N, vocab] (the last stage)."""
        assert self.lm_head is not None, "logits come from the last pipeline stage"
        return self.lm_head(hidden_states)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """Load HF-named weights (this stage's); returns the parameter names loaded."""
        stage = self.model.stage
        # A last stage that is not also the first holds the tied head without the embedding.
        tied_head = self.tie_word_embeddings and stage.is_last and not stage.is_first

        def skip(name: str) -> bool:
            if "rotary_emb." in name:
                return True
            if name == "lm_head.weight":  # tied: the head is the embedding (or its copy)
                return not stage.is_last or (self.tie_word_embeddings and not tied_head)
            if name == "model.embed_tokens.weight":
                return not stage.is_first
            if name.startswith("model.norm."):
                return not stage.is_last
            layer = name.split(".")[2] if name.startswith("model.layers.") else None
            return layer is not None and int(layer) not in self.model.local_layers

        def renamed(items: Iterable[tuple[str, torch.Tensor]]):
            for name, tensor in items:
                if tied_head and name == "model.embed_tokens.weight":
                    name = "lm_head.weight"
                yield name, tensor

        return load_checkpoint_weights(self, renamed(weights), skip)
