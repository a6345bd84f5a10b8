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
from pagoda.models.layers.mlp import SiluMLP
from pagoda.models.layers.norm import LayerNorm, RMSNorm
from pagoda.models.layers.rotary import RotaryEmbedding, get_rotary_embedding, rope_parameters

__all__ = [
    "Attention",
    "ColumnParallelLinear",
    "LayerNorm",
    "Linear",
    "MergedColumnParallelLinear",
    "ParallelLMHead",
    "QKVParallelLinear",
    "RMSNorm",
    "RotaryEmbedding",
    "RowParallelLinear",
    "SiluMLP",
    "VocabParallelEmbedding",
    "get_rotary_embedding",
    "rope_parameters",
]
