"""TokenCounts: the penalties' per-request token statistics, kept on the device across steps.

A request with penalties owns a slot: a row of `output_counts` (occurrences of each token
in its output) and of `in_prompt` (tokens of its prompt). The slot is filled once, then
each step adds only the tokens appended since, so a step costs O(new tokens), not O(all
tokens). The slot is reused once its `SamplingState` is garbage-collected.

Output lists only grow by appending (a placeholder id < 0 may stand for a token still in
flight: counting stops before it until it is filled in). A list that was replaced or got
shorter is counted afresh.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from pagoda.sample.state import SamplingState


@dataclass
class _Slot:
    index: int
    tokens: list[int]  # the state's output list, to notice a replaced list
    counted: int  # its first `counted` tokens are in output_counts


def _known(tokens: list[int], start: int) -> list[int]:
    """tokens[start:] up to the first placeholder (an id < 0)."""
    new = tokens[start:]
    if new and min(new) < 0:
        new = new[: next(i for i, t in enumerate(new) if t < 0)]
    return new


class TokenCounts:
    """Output token counts [slots, V] (float32) and prompt membership [slots, V] (bool)."""

    def __init__(self, vocab_size: int, device: torch.device) -> None:
        self.vocab_size = vocab_size
        self.device = device
        self.output_counts = torch.zeros(0, vocab_size, dtype=torch.float32, device=device)
        self.in_prompt = torch.zeros(0, vocab_size, dtype=torch.bool, device=device)
        self._slots: weakref.WeakKeyDictionary[SamplingState, _Slot] = (
            weakref.WeakKeyDictionary())
        self._owners: list[weakref.ref[SamplingState] | None] = []

    def update(self, states: Sequence[SamplingState]) -> list[int]:
        """Bring the slots of `states` up to date; returns their slot indices."""
        known = [self._slots.get(s) for s in states]
        fresh = [i for i, (s, slot) in enumerate(zip(states, known, strict=True))
                 if slot is None or slot.tokens is not s.output_token_ids
                 or slot.counted > len(s.output_token_ids)]
        taken = iter(self._take(sum(known[i] is None for i in fresh)))
        for i in fresh:  # a state counted afresh keeps its slot
            old = known[i]
            index = next(taken) if old is None else old.index
            known[i] = self._slots[states[i]] = _Slot(index, states[i].output_token_ids, 0)
            self._owners[index] = weakref.ref(states[i])
        slots = [slot for slot in known if slot is not None]
        prompt_rows: list[int] = []
        prompt_tokens: list[int] = []
        for i in fresh:
            if states[i].params.repetition_penalty != 1.0:
                prompt_tokens += states[i].prompt_token_ids
                prompt_rows += [slots[i].index] * len(states[i].prompt_token_ids)
        count_rows: list[int] = []
        count_tokens: list[int] = []
        for slot in slots:
            new = _known(slot.tokens, slot.counted)
            slot.counted += len(new)
            count_tokens += new
            count_rows += [slot.index] * len(new)
        reset = [slots[i].index for i in fresh]
        self._apply(reset, prompt_rows, prompt_tokens, count_rows, count_tokens)
        return [slot.index for slot in slots]

    def _take(self, n: int) -> list[int]:
        """n slot indices whose owner is gone, growing the tensors when there are too few."""
        free = [i for i, owner in enumerate(self._owners) if owner is None or owner() is None]
        if len(free) < n:
            old = len(self._owners)
            new = max(2 * old, old + n - len(free), 8)
            self._owners += [None] * (new - old)
            free += range(old, new)
            self.output_counts = _grown(self.output_counts, new)
            self.in_prompt = _grown(self.in_prompt, new)
        return free[:n]

    def _apply(self, reset: list[int], prompt_rows: list[int], prompt_tokens: list[int],
               count_rows: list[int], count_tokens: list[int]) -> None:
        """Zero the `reset` slots, mark prompt tokens, add output tokens: one host-to-device
        copy for all of it."""
        sizes = [len(reset), len(prompt_rows), len(count_rows)]
        if not any(sizes):
            return
        flat = torch.tensor(reset + prompt_rows + prompt_tokens + count_rows + count_tokens,
                            dtype=torch.int64).to(self.device, non_blocking=True)
        reset_t, p_rows, p_tokens, c_rows, c_tokens = flat.split(
            [sizes[0], sizes[1], sizes[1], sizes[2], sizes[2]])
        # Values are made on the device: a Python scalar would be copied, a host sync.
        if sizes[0]:
            self.output_counts.index_put_((reset_t,), self.output_counts.new_zeros(()))
            self.in_prompt.index_put_((reset_t,), self.in_prompt.new_zeros(()))
        if sizes[1]:
            self.in_prompt.index_put_((p_rows, p_tokens), self.in_prompt.new_ones(()))
        if sizes[2]:
            self.output_counts.index_put_((c_rows, c_tokens), torch.ones_like(
                c_rows, dtype=torch.float32), accumulate=True)


def _grown(t: Tensor, rows: int) -> Tensor:
    out = torch.zeros(rows, *t.shape[1:], dtype=t.dtype, device=t.device)
    out[: t.shape[0]] = t
    return out
