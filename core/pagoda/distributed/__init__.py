"""Several devices: the process groups workers join and the shards layers take."""

from pagoda.distributed.parallel_state import (
    PipelineGroup,
    TensorParallelGroup,
    destroy_distributed,
    init_distributed,
    pp_group,
    tp_group,
)
from pagoda.distributed.partition import AttentionHeads, shard_range

__all__ = [
    "AttentionHeads",
    "PipelineGroup",
    "TensorParallelGroup",
    "destroy_distributed",
    "init_distributed",
    "pp_group",
    "shard_range",
    "tp_group",
]
