"""Building blocks of the models: each binds its ops from the active op table at __init__."""

from pagoda.models.layers.attention import Attention
from pagoda.models.layers.embedding import LMHead, VocabEmbedding
from pagoda.models.layers.linear import Linear, MergedLinear, QKVLinear
from pagoda.models.layers.mlp import SiluMLP
from pagoda.models.layers.norm import RMSNorm
from pagoda.models.layers.rotary import RotaryEmbedding, get_rotary_embedding, rope_parameters

__all__ = [
    "Attention",
    "LMHead",
    "Linear",
    "MergedLinear",
    "QKVLinear",
    "RMSNorm",
    "RotaryEmbedding",
    "SiluMLP",
    "VocabEmbedding",
    "get_rotary_embedding",
    "rope_parameters",
]
