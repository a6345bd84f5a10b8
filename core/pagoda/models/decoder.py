"""The decoder-only transformer every dense family shares, built from a `DecoderSpec`.

A layer is pre-norm attention then a gated MLP, each added to the residual stream (the
add fused with the next norm); Gemma's sandwich norms also normalize each block's output.
A family subclasses `DecoderForCausalLM` and says how its config maps onto the spec
(`decoder_spec`), and, for sparse layers, what builds each feed-forward block
(`feed_forward`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import torch
from torch import nn

from pagoda.attention import AttentionBackend, AttentionMetadata, KVCacheSpec
from pagoda.distributed import pp_group
from pagoda.models.decoder_spec import DecoderSpec, attention_shape, layer_sliding_windows
from pagoda.models.layers import (
    Attention,
    GatedMLP,
    ParallelLMHead,
    QKVParallelLinear,
    RMSNorm,
    RotaryEmbedding,
    RowParallelLinear,
    VocabParallelEmbedding,
    layer_rotary_embeddings,
)
from pagoda.models.weights import load_checkpoint_weights
from pagoda.quant import QuantMethod
from pagoda.quant.tensors import GroupQuantWeight, QuantizedActivation

if TYPE_CHECKING:
    from transformers import PretrainedConfig

    from pagoda.models.decode_fusion import FusedDecodeLayer


FeedForward = Callable[..., nn.Module]
"""Builds decoder layer `index`'s feed-forward block, a module from hidden states [T, H] to
[T, H]: (spec, index, *, dtype, quant_method, prefix) -> module."""


def gated_mlp(spec: DecoderSpec, index: int, *, dtype: torch.dtype,
              quant_method: QuantMethod | None, prefix: str) -> nn.Module:
    """The dense families' feed-forward block, the same in every layer."""
    return GatedMLP(spec.hidden_size, spec.intermediate_size, activation=spec.activation,
                    bias=spec.mlp_bias, dtype=dtype, quant_method=quant_method, prefix=prefix,
                    fused_checkpoint=spec.fused_checkpoint)


class DecoderAttention(nn.Module):
    def __init__(
        self,
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
            prefix=f"{prefix}.qkv_proj", fused_checkpoint=spec.fused_checkpoint,
        )
        heads = self.qkv_proj.heads  # this rank's
        self.num_heads, self.num_kv_heads = heads.local_heads, heads.local_kv_heads
        self.head_size = spec.head_size
        self.o_proj = RowParallelLinear(
            spec.num_heads * spec.head_size, spec.hidden_size,
            bias=spec.o_bias, dtype=dtype, quant_method=quant_method, prefix=f"{prefix}.o_proj",
        )
        self.q_norm = self._head_norm(spec, dtype) if spec.qk_norm else None
        self.k_norm = self._head_norm(spec, dtype) if spec.qk_norm else None
        self.rotary_emb = rotary
        self.attn = Attention(
            self.num_heads, spec.head_size, self.num_kv_heads, attn_backend=attn_backend,
            scale=spec.attention_scale, sliding_window=sliding_window,
            logits_soft_cap=spec.attn_soft_cap,
        )

    @staticmethod
    def _head_norm(spec: DecoderSpec, dtype: torch.dtype) -> RMSNorm:
        return RMSNorm(spec.head_size, spec.rms_norm_eps, dtype=dtype, offset=spec.norm_offset)

    def forward(
        self,
        positions: torch.Tensor,
        hidden_states: torch.Tensor | QuantizedActivation,
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


class DecoderLayer(nn.Module):
    def __init__(
        self,
        spec: DecoderSpec,
        rotary: RotaryEmbedding,
        *,
        sliding_window: int | None,
        dtype: torch.dtype,
        attn_backend: type[AttentionBackend],
        quant_method: QuantMethod | None,
        prefix: str,
        index: int,
        feed_forward: FeedForward = gated_mlp,
    ):
        super().__init__()
        self.self_attn = DecoderAttention(
            spec, rotary, sliding_window=sliding_window, dtype=dtype,
            attn_backend=attn_backend, quant_method=quant_method, prefix=f"{prefix}.self_attn",
        )
        self.mlp = feed_forward(spec, index, dtype=dtype, quant_method=quant_method,
                                prefix=f"{prefix}.mlp")

        def norm() -> RMSNorm:
            return RMSNorm(spec.hidden_size, spec.rms_norm_eps, dtype=dtype,
                           offset=spec.norm_offset)

        self.input_layernorm = norm()
        # Without sandwich norms this is the MLP's input norm (HF's name for it).
        self.post_attention_layernorm = norm()
        self.pre_feedforward_layernorm = norm() if spec.sandwich_norms else None
        self.post_feedforward_layernorm = norm() if spec.sandwich_norms else None
        self.fused_decode: FusedDecodeLayer | None = None
        """The platform's fused decode step (`pagoda.models.decode_fusion`), if it gave one."""

    def forward(
        self,
        positions: torch.Tensor,
        hidden_states: torch.Tensor,
        residual: torch.Tensor | None,
        kv_cache: torch.Tensor,
        attn_metadata: AttentionMetadata,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """-> (this layer's output, the residual stream before it is added)."""
        fused = self.fused_decode
        if (fused is not None and attn_metadata.is_pure_decode
                and attn_metadata.num_tokens <= fused.max_rows):
            q, k, v, residual = fused.pre_attention(positions, hidden_states, residual)
            return fused.post_attention(self.self_attn.attn(q, k, v, kv_cache, attn_metadata),
                                        residual)
        # Each norm hands the linear after it its input quantized where that linear takes it
        # so (a W8A8 layer's many-row steps, `Linear.input_quantization`).
        rows = hidden_states.shape[0]
        if residual is None:
            residual, hidden_states = hidden_states, self.input_layernorm(hidden_states)
        else:
            hidden_states, residual = self.input_layernorm.add_norm(
                hidden_states, residual, self.self_attn.qkv_proj.input_quantization(rows))
        hidden_states = self.self_attn(positions, hidden_states, kv_cache, attn_metadata)
        mlp_input = self.mlp.input_quantization(rows) if isinstance(self.mlp, GatedMLP) else None
        if self.pre_feedforward_layernorm is None:
            hidden_states, residual = self.post_attention_layernorm.add_norm(
                hidden_states, residual, mlp_input)
        else:
            hidden_states = self.post_attention_layernorm(hidden_states)
            hidden_states, residual = self.pre_feedforward_layernorm.add_norm(
                hidden_states, residual, mlp_input)
        hidden_states = self.mlp(hidden_states)
        if self.post_feedforward_layernorm is not None:
            hidden_states = self.post_feedforward_layernorm(hidden_states)
        return hidden_states, residual


class DecoderModel(nn.Module):
    """The decoder stack; under pipeline parallelism, this rank's stage of it: its layers
    (the others are empty placeholders, so weight names keep their indices), the embedding
    on the first stage and the final norm on the last."""

    def __init__(
        self,
        config: PretrainedConfig,
        spec: DecoderSpec,
        *,
        dtype: torch.dtype,
        attn_backend: type[AttentionBackend],
        quant_method: QuantMethod | None,
        feed_forward: FeedForward = gated_mlp,
    ):
        super().__init__()
        self.stage = pp_group()
        self.hidden_size, self.dtype = spec.hidden_size, dtype
        self.local_layers = self.stage.layers(config.num_hidden_layers)
        self.embed_tokens = (VocabParallelEmbedding(config.vocab_size, spec.hidden_size,
                                                    dtype=dtype)
                             if self.stage.is_first else None)
        # HF multiplies by the scale as a tensor of the model dtype: the rounded value.
        self.embed_scale = (float(torch.tensor(spec.hidden_size**0.5, dtype=dtype))
                            if spec.embedding_scale else None)
        rotaries = layer_rotary_embeddings(config, spec.head_size)
        windows = layer_sliding_windows(config)
        self.layers = nn.ModuleList(
            DecoderLayer(
                spec, rotaries[index], sliding_window=windows[index], dtype=dtype,
                attn_backend=attn_backend, quant_method=quant_method,
                prefix=f"model.layers.{index}", index=index, feed_forward=feed_forward,
            ) if index in self.local_layers else nn.Identity()
            for index in range(config.num_hidden_layers)
        )
        self.norm = (RMSNorm(spec.hidden_size, spec.rms_norm_eps, dtype=dtype,
                             offset=spec.norm_offset)
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
            if self.embed_scale is not None:
                hidden_states = hidden_states * self.embed_scale
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


class DecoderForCausalLM(nn.Module):
    """A causal LM over a flattened, mixed prefill + decode batch and a paged KV cache.

    A family subclasses it and defines `decoder_spec`.
    """

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
        spec = self.decoder_spec(config)
        self.tie_word_embeddings = spec.tie_word_embeddings
        self.model = DecoderModel(config, spec, dtype=dtype, attn_backend=attn_backend,
                                  quant_method=quant_method,
                                  feed_forward=self.feed_forward(config))
        self.lm_head = (ParallelLMHead(config.vocab_size, config.hidden_size, dtype=dtype,
                                       tied_to=self.model.embed_tokens
                                       if self.tie_word_embeddings else None,
                                       soft_cap=spec.final_soft_cap)
                        if self.model.stage.is_last else None)

    @staticmethod
    def decoder_spec(config: PretrainedConfig) -> DecoderSpec:
        """The family's reading of its config (a ValueError naming what it cannot build)."""
        raise NotImplementedError

    def feed_forward(self, config: PretrainedConfig) -> FeedForward:
        """What builds each layer's feed-forward block (a mixture-of-experts family's
        hook)."""
        return gated_mlp

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
                if (name == "model.embed_tokens.weight" and self.tie_word_embeddings
                        and stage.is_last and isinstance(tensor, GroupQuantWeight)):
                    self.lm_head.keep_quantized(tensor)  # the embedding takes it dense
                if tied_head and name == "model.embed_tokens.weight":
                    name = "lm_head.weight"
                yield name, tensor

        return load_checkpoint_weights(self, renamed(weights), skip)
