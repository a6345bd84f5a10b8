"""Which part of a tensor-parallel layer a rank holds."""

from __future__ import annotations

from dataclasses import dataclass


def shard_range(size: int, rank: int, world_size: int) -> tuple[int, int]:
    """(start, length) of rank's equal share of `size`, which world_size must divide."""
    if size % world_size:
        raise ValueError(f"{size} does not split evenly over tensor_parallel_size "
                         f"{world_size}")
    length = size // world_size
    return rank * length, length


@dataclass(frozen=True)
class AttentionHeads:
    """One rank's attention heads. Query heads split evenly; key/value heads split evenly
    when there are at least as many as ranks, else each is replicated on the ranks whose
    query heads it serves (GQA groups stay whole)."""

    num_heads: int
    """Query heads of the whole model."""
    num_kv_heads: int
    rank: int = 0
    world_size: int = 1

    def __post_init__(self) -> None:
        tp, kv = self.world_size, self.num_kv_heads
        if self.num_heads % tp:
            raise ValueError(f"{self.num_heads} attention heads do not split over "
                             f"tensor_parallel_size {tp}")
        if kv % tp and tp % kv:
            raise ValueError(f"{kv} key/value heads neither split over nor divide "
                             f"tensor_parallel_size {tp}")

    @property
    def local_heads(self) -> int:
        return self.num_heads // self.world_size

    @property
    def local_kv_heads(self) -> int:
        return max(1, self.num_kv_heads // self.world_size)

    @property
    def first_kv_head(self) -> int:
        """The model's index of this rank's first key/value head."""
        if self.num_kv_heads >= self.world_size:
            return self.rank * self.local_kv_heads
        return self.rank // (self.world_size // self.num_kv_heads)
