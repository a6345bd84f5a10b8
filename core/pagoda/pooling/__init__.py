"""Pooling models as data, without torch: what a model's pooled output is (`PoolerSpec`),
what a sentence-transformers checkpoint says about it, and scoring text pairs."""

from pagoda.pooling.scoring import cosine_similarity, score_pairs
from pagoda.pooling.sentence_transformers import (
    SentenceTransformersConfig,
    read_sentence_transformers_config,
)
from pagoda.pooling.spec import PoolerSpec, PoolingType, resolve_pooler_spec

__all__ = ["PoolerSpec", "PoolingType", "SentenceTransformersConfig", "cosine_similarity",
           "read_sentence_transformers_config", "resolve_pooler_spec", "score_pairs"]
