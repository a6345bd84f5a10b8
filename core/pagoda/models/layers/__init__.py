"""Building blocks of the models: each binds its ops from the active op table at __init__."""

from pagoda.models.layers.attention import Attention
from pagoda.models.layers.embedding import ParallelLMHead, VocabParallelEmbedding
from pagoda.models.layers.linear import (
    ColumnParallelLinear,
    Linear,
    MergedColumnParallelLinear,
    QKVParallelLinear,
    RowParallelLinear,
)
from pagoda.models.layers.mlp import GatedMLP
from pagoda.models.layers.norm import LayerNorm, RMSNorm
from pagoda.models.layers.rotary import (
    RotaryEmbedding,
    get_rotary_embedding,
    layer_rotary_embeddings,
    rope_parameters,
)

__all__ = [
    "Attention",
    "ColumnParallelLinear",
    "GatedMLP",
    "LayerNorm",
    "Linear",
    "MergedColumnParallelLinear",
    "ParallelLMHead",
    "QKVParallelLinear",
    "RMSNorm",
    "RotaryEmbedding",
    "RowParallelLinear",
    "VocabParallelEmbedding",
    "get_rotary_embedding",
    "layer_rotary_embeddings",
    "rope_parameters",
]
