"""Step shaping: how a platform whose device compiles a program per input shape (XLA,
Gaudi) pads each step, so that few distinct shapes ever run.

The model runner asks the platform once for a `StepPadding` (`Platform.step_padding`) and
pads every step with it: padding tokens have id 0, position 0 and slot -1 (never cached);
padding sequences have no query rows, length 0 and a block-table row of zeros; rows
gathered from a step's hidden states (for logits) are padded with row 0. Their results
are dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class StepShape:
    """The sizes of one flattened step."""

    num_tokens: int
    num_seqs: int
    max_blocks: int
    """Width of the block table: blocks of the step's longest sequence."""


class StepPadding(Protocol):
    """A platform's padding policy, for one engine's limits."""

    def pad(self, shape: StepShape) -> StepShape:
        """The shape a step of `shape` runs at: at least `shape` in every dimension."""

    def rows(self, n: int) -> int:
        """How many rows a gather of `n` rows of hidden states is padded to (>= n)."""
