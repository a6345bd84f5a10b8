"""PoolingParams: what one request of a pooling model asks for."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

PoolingTask = Literal["embed", "score"]
"""embed: one embedding per prompt; score: a relevance score per text pair (the output of
a cross-encoder's classifier)."""
POOLING_TASKS: tuple[PoolingTask, ...] = ("embed", "score")


@dataclass
class PoolingParams:
    """Parameters of one pooling request; invalid values raise ValueError naming the
    field. The pooling itself (mean, first or last token; normalized or not) is the
    model's, fixed when it loads (`pagoda.config.PoolerConfig`)."""

    task: PoolingTask = "embed"
    dimensions: int | None = None
    """Keep the embedding's first `dimensions` values (normalized afterwards where the
    model normalizes): for Matryoshka models only. None: the whole embedding."""

    def __post_init__(self) -> None:
        if self.task not in POOLING_TASKS:
            raise ValueError(f"task must be one of {', '.join(POOLING_TASKS)}, got {self.task!r}")
        if self.dimensions is not None and (
                not isinstance(self.dimensions, int) or isinstance(self.dimensions, bool)
                or self.dimensions < 1):
            raise ValueError(f"dimensions must be an integer >= 1, got {self.dimensions!r}")
        if self.dimensions is not None and self.task != "embed":
            raise ValueError("dimensions applies to embeddings only, not to task "
                             f"{self.task!r}")
