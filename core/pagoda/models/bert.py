"""BERT encoders: `BertModel` as an embedding model (sentence-transformers' all-MiniLM and
its kind) and `BertForSequenceClassification` as a cross-encoder (a reranker's relevance
score of a text pair).

An encoder's attention is bidirectional: every token sees its whole prompt, so a prompt
runs in one step and nothing is cached (`encoder_attention`, no KV cache). Embeddings sum
word, absolute position and token type (a text pair's segment) vectors; each layer is
attention and a GELU MLP, each followed by a residual add and a LayerNorm (post-norm).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from pagoda.attention import AttentionBackend, AttentionMetadata, KVCacheSpec
from pagoda.distributed import AttentionHeads, pp_group, tp_group
from pagoda.models.layers import (
    ColumnParallelLinear,
    LayerNorm,
    Linear,
    MergedColumnParallelLinear,
    RowParallelLinear,
    VocabParallelEmbedding,
)
from pagoda.models.pooler import PoolingModel, select_rows
from pagoda.models.weights import load_checkpoint_weights
from pagoda.ops import current_ops
from pagoda.pooling import PoolerSpec
from pagoda.quant import QuantMethod

if TYPE_CHECKING:
    from transformers import PretrainedConfig

_GELU_APPROXIMATIONS = {"gelu": "none", "gelu_new": "tanh", "gelu_pytorch_tanh": "tanh"}
"""HF hidden_act names of the GELUs, and the `approximate` of the gelu op for each."""


def _check_config(config: PretrainedConfig) -> None:
    """ValueError naming a config field whose value this implementation does not follow."""
    position = getattr(config, "position_embedding_type", "absolute")
    if position != "absolute":
        raise ValueError(f"position_embedding_type {position!r} is not supported (absolute)")
    if getattr(config, "is_decoder", False):
        raise ValueError("is_decoder: a BERT decoder is not supported (encoders only)")
    if config.hidden_act not in _GELU_APPROXIMATIONS:
        raise ValueError(f"hidden_act {config.hidden_act!r} is not supported "
                         f"({', '.join(_GELU_APPROXIMATIONS)})")
    if config.num_attention_heads % tp_group().world_size:
        raise ValueError(f"num_attention_heads {config.num_attention_heads} does not divide "
                         f"over tensor_parallel_size {tp_group().world_size}")
    if pp_group().world_size > 1:
        raise ValueError("pipeline_parallel_size > 1 is not supported for pooling models")


class BertEmbeddings(nn.Module):
    def __init__(self, config: PretrainedConfig, *, dtype: torch.dtype):
        super().__init__()
        hidden = config.hidden_size
        self.word_embeddings = VocabParallelEmbedding(config.vocab_size, hidden, dtype=dtype)
        self.position_embeddings = VocabParallelEmbedding(config.max_position_embeddings,
                                                          hidden, dtype=dtype)
        self.token_type_embeddings = VocabParallelEmbedding(config.type_vocab_size, hidden,
                                                            dtype=dtype)
        self.LayerNorm = LayerNorm(hidden, config.layer_norm_eps, dtype=dtype)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor,
                token_type_ids: torch.Tensor) -> torch.Tensor:
        words = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        return self.LayerNorm(words + self.position_embeddings(positions))


class BertSelfAttention(nn.Module):
    """Query, key and value in one matmul (checkpoint shards query, key, value), this rank's
    heads attending bidirectionally within each prompt."""

    def __init__(self, config: PretrainedConfig, *, dtype: torch.dtype,
                 quant_method: QuantMethod | None, prefix: str):
        super().__init__()
        hidden, heads = config.hidden_size, config.num_attention_heads
        self.qkv_proj = MergedColumnParallelLinear(
            hidden, {"query": hidden, "key": hidden, "value": hidden}, bias=True, dtype=dtype,
            quant_method=quant_method, prefix=f"{prefix}.qkv_proj")
        tp = tp_group()
        self.num_heads = AttentionHeads(heads, heads, tp.rank, tp.world_size).local_heads
        self.head_size = hidden // heads
        self.scale = self.head_size**-0.5
        self._attention = current_ops().encoder_attention

    def forward(self, hidden_states: torch.Tensor, metadata: AttentionMetadata) -> torch.Tensor:
        shape = (hidden_states.shape[0], self.num_heads, self.head_size)
        q, k, v = (t.reshape(shape) for t in self.qkv_proj.split(self.qkv_proj(hidden_states)))
        return self._attention(q, k, v, metadata.query_start_loc, self.scale).flatten(1)


class BertSelfOutput(nn.Module):
    """dense, then LayerNorm of it plus the block's input (BertSelfOutput and BertOutput)."""

    def __init__(self, config: PretrainedConfig, input_size: int, *, dtype: torch.dtype,
                 quant_method: QuantMethod | None, prefix: str):
        super().__init__()
        self.dense = RowParallelLinear(input_size, config.hidden_size, bias=True, dtype=dtype,
                                       quant_method=quant_method, prefix=f"{prefix}.dense")
        self.LayerNorm = LayerNorm(config.hidden_size, config.layer_norm_eps, dtype=dtype)

    def forward(self, hidden_states: torch.Tensor, block_input: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dense(hidden_states) + block_input)


class BertAttention(nn.Module):
    def __init__(self, config: PretrainedConfig, *, dtype: torch.dtype,
                 quant_method: QuantMethod | None, prefix: str):
        super().__init__()
        self.self = BertSelfAttention(config, dtype=dtype, quant_method=quant_method,
                                      prefix=f"{prefix}.self")
        self.output = BertSelfOutput(config, config.hidden_size, dtype=dtype,
                                     quant_method=quant_method, prefix=f"{prefix}.output")

    def forward(self, hidden_states: torch.Tensor, metadata: AttentionMetadata) -> torch.Tensor:
        return self.output(self.self(hidden_states, metadata), hidden_states)


class BertIntermediate(nn.Module):
    def __init__(self, config: PretrainedConfig, *, dtype: torch.dtype,
                 quant_method: QuantMethod | None, prefix: str):
        super().__init__()
        self.dense = ColumnParallelLinear(config.hidden_size, config.intermediate_size,
                                          bias=True, dtype=dtype, quant_method=quant_method,
                                          prefix=f"{prefix}.dense")
        self.approximate = _GELU_APPROXIMATIONS[config.hidden_act]
        self._gelu = current_ops().gelu

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self._gelu(self.dense(hidden_states), self.approximate)


class BertLayer(nn.Module):
    def __init__(self, config: PretrainedConfig, *, dtype: torch.dtype,
                 quant_method: QuantMethod | None, prefix: str):
        super().__init__()
        common: dict[str, Any] = {"dtype": dtype, "quant_method": quant_method}
        self.attention = BertAttention(config, prefix=f"{prefix}.attention", **common)
        self.intermediate = BertIntermediate(config, prefix=f"{prefix}.intermediate", **common)
        self.output = BertSelfOutput(config, config.intermediate_size,
                                     prefix=f"{prefix}.output", **common)

    def forward(self, hidden_states: torch.Tensor, metadata: AttentionMetadata) -> torch.Tensor:
        attended = self.attention(hidden_states, metadata)
        return self.output(self.intermediate(attended), attended)


class BertEncoder(nn.Module):
    def __init__(self, config: PretrainedConfig, *, dtype: torch.dtype,
                 quant_method: QuantMethod | None, prefix: str):
        super().__init__()
        self.layer = nn.ModuleList(
            BertLayer(config, dtype=dtype, quant_method=quant_method,
                      prefix=f"{prefix}.layer.{i}")
            for i in range(config.num_hidden_layers))

    def forward(self, hidden_states: torch.Tensor, metadata: AttentionMetadata) -> torch.Tensor:
        for layer in self.layer:
            hidden_states = layer(hidden_states, metadata)
        return hidden_states


class BertPooler(nn.Module):
    """tanh(dense(the first token's hidden state)): what a classifier head reads."""

    def __init__(self, config: PretrainedConfig, *, dtype: torch.dtype,
                 quant_method: QuantMethod | None, prefix: str):
        super().__init__()
        self.dense = Linear(config.hidden_size, config.hidden_size, bias=True, dtype=dtype,
                            quant_method=quant_method, prefix=f"{prefix}.dense")

    def forward(self, first_tokens: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(first_tokens))


class BertBody(nn.Module):
    """HF's BertModel: embeddings and encoder layers, and the pooler layer when a head on
    top reads it; its weights named as HF's under `prefix`."""

    def __init__(self, config: PretrainedConfig, *, dtype: torch.dtype,
                 quant_method: QuantMethod | None, with_pooler: bool, prefix: str):
        super().__init__()
        _check_config(config)
        self.embeddings = BertEmbeddings(config, dtype=dtype)
        self.encoder = BertEncoder(config, dtype=dtype, quant_method=quant_method,
                                   prefix=f"{prefix}encoder")
        self.pooler = (BertPooler(config, dtype=dtype, quant_method=quant_method,
                                  prefix=f"{prefix}pooler") if with_pooler else None)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor,
                metadata: AttentionMetadata, token_type_ids: torch.Tensor | None) -> torch.Tensor:
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        return self.encoder(self.embeddings(input_ids, positions, token_type_ids), metadata)


class _BertPoolingModel(PoolingModel, nn.Module):
    """What both BERT models share: the body under `bert.`, no KV cache."""

    bidirectional = True
    uses_token_type_ids = True
    num_attention_layers = 0
    """Layers that need a KV cache: none."""
    _with_pooler = False

    def __init__(self, config: PretrainedConfig, *, dtype: torch.dtype,
                 attn_backend: type[AttentionBackend], quant_method: QuantMethod | None = None,
                 pooler_spec: PoolerSpec):
        super().__init__()
        self.config = config
        self.pooler_spec = pooler_spec
        self.bert = BertBody(config, dtype=dtype, quant_method=quant_method,
                             with_pooler=self._with_pooler, prefix="bert.")

    def kv_cache_spec(self, block_size: int, kv_cache_dtype: torch.dtype) -> KVCacheSpec:
        """The layout a KV cache would have (the engine allocates none: no layer needs it)."""
        attention = self.bert.encoder.layer[0].attention.self
        return KVCacheSpec(block_size, attention.num_heads, attention.head_size,
                           kv_cache_dtype)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor,
                kv_caches: list[torch.Tensor], attn_metadata: AttentionMetadata,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Each prompt whole in one step -> final hidden states [T, hidden]."""
        return self.bert(input_ids, positions, attn_metadata, token_type_ids)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """HF-named weights, with or without the "bert." prefix (a bare BertModel's
        checkpoint has none); the position_ids buffer older checkpoints saved is skipped."""
        return load_checkpoint_weights(self, self._renamed(weights),
                                       lambda name: name.endswith("embeddings.position_ids"))

    def _renamed(self, weights: Iterable[tuple[str, torch.Tensor]]
                 ) -> Iterator[tuple[str, torch.Tensor]]:
        for name, tensor in weights:
            if name.startswith(("embeddings.", "encoder.", "pooler.")):
                name = "bert." + name
            yield name, tensor


class BertModel(_BertPoolingModel):
    """An embedding model: the encoder's hidden states pooled (by default their mean, as
    sentence-transformers pools a BERT without a config of its own)."""

    default_pooling = "mean"
    default_normalize = False

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """As `_BertPoolingModel`'s; the pooler layer (embeddings do not read it) is
        skipped."""
        return super().load_weights((name, tensor) for name, tensor in weights
                                    if not name.startswith(("pooler.", "bert.pooler.")))


class BertForSequenceClassification(_BertPoolingModel):
    """A cross-encoder: a text pair's relevance score from the classifier on the pooler
    layer's output for its first token, through the model's activation."""

    pooling_task = "score"
    default_pooling = "cls"
    _with_pooler = True

    def __init__(self, config: PretrainedConfig, *, dtype: torch.dtype,
                 attn_backend: type[AttentionBackend], quant_method: QuantMethod | None = None,
                 pooler_spec: PoolerSpec):
        super().__init__(config, dtype=dtype, attn_backend=attn_backend,
                         quant_method=quant_method, pooler_spec=pooler_spec)
        self.classifier = Linear(config.hidden_size, config.num_labels, bias=True, dtype=dtype,
                                 quant_method=quant_method, prefix="classifier")

    def pool(self, hidden: torch.Tensor, spans: list[tuple[int, int]]) -> torch.Tensor:
        assert self.bert.pooler is not None
        first_tokens = select_rows(hidden, [start for start, _ in spans])
        logits = self.classifier(self.bert.pooler(first_tokens)).float()
        return logits.sigmoid() if self.pooler_spec.activation == "sigmoid" else logits
