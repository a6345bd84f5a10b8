"""Several devices: the process groups workers join and the shards layers take."""

from pagoda.distributed.parallel_state import (
    TensorParallelGroup,
    destroy_distributed,
    init_distributed,
    tp_group,
)
from pagoda.distributed.partition import AttentionHeads, shard_range

__all__ = [
    "AttentionHeads",
    "TensorParallelGroup",
    "destroy_distributed",
    "init_distributed",
    "shard_range",
    "tp_group",
]
