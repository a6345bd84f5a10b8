"""SamplingBatch: one step's per-request sampling parameters as device tensors.

Built once per step from the requests' `SamplingState`s, with one host-to-device copy per
kind of parameter (not per request). Anything no request asked for is None, so the
sampler skips it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from pagoda.sample.state import SamplingState
from pagoda.sample.token_counts import TokenCounts

_PENALTY_NEUTRAL = (1.0, 0.0, 0.0)
"""(repetition, frequency, presence) penalties that change nothing."""


def _tensor(data: Sequence, dtype: torch.dtype, device: torch.device) -> Tensor:
    return torch.tensor(data, dtype=dtype).to(device, non_blocking=True)


def _rows(rows: list[tuple], dtype: torch.dtype, device: torch.device) -> Tensor:
    """rows as a [len(rows), width] tensor; when all are equal, one row copied and expanded."""
    if rows.count(rows[0]) == len(rows):
        return _tensor(rows[:1], dtype, device).expand(len(rows), -1)
    return _tensor(rows, dtype, device)


@dataclass(frozen=True)
class TokenEntries:
    """Sparse (row, token id[, value]) entries of a [B, V] tensor."""

    rows: Tensor
    cols: Tensor
    values: Tensor | None = None

    @classmethod
    def build(cls, entries: list[tuple], device: torch.device) -> TokenEntries | None:
        if not entries:
            return None
        rows, cols, *values = zip(*entries, strict=True)
        return cls(_tensor(rows, torch.int64, device), _tensor(cols, torch.int64, device),
                   _tensor(values[0], torch.float32, device) if values else None)


@dataclass(frozen=True)
class Penalties:
    """Penalties of the rows that have any; `rows` index the batch, the rest is [P, ...]."""

    rows: Tensor
    output_counts: Tensor  # [P, V] float32: occurrences of each token in the output
    repetition: Tensor | None  # [P, 1]
    seen_in_prompt: Tensor | None  # [P, V] bool; with `repetition` only
    frequency: Tensor | None  # [P, 1]
    presence: Tensor | None  # [P, 1]

    @classmethod
    def build(cls, states: Sequence[SamplingState], rows: list[int],
              counts: TokenCounts) -> Penalties | None:
        """Penalties of states[i] for i in `rows`, from their slots in `counts`."""
        if not rows:
            return None
        slots = counts.update([states[i] for i in rows])
        values = [states[i].penalties for i in rows]
        used = [any(v[j] != neutral for v in values) for j, neutral in enumerate(_PENALTY_NEUTRAL)]
        index = _tensor([rows, slots], torch.int64, counts.device)
        table = _rows(values, torch.float32, counts.device)
        columns = [table[:, j : j + 1] if used[j] else None for j in range(3)]
        return cls(
            rows=index[0],
            output_counts=counts.output_counts[index[1]],
            repetition=columns[0],
            seen_in_prompt=counts.in_prompt[index[1]] if used[0] else None,
            frequency=columns[1],
            presence=columns[2],
        )


@dataclass(frozen=True)
class SamplingBatch:
    """Per-step sampling inputs for B requests over a vocabulary of V tokens."""

    vocab_size: int
    all_greedy: bool
    temperature: Tensor | None  # [B] float32; 0 on greedy rows; None when all greedy
    top_k: Tensor | None  # [B] int64; V on rows without top-k
    max_top_k: int
    top_p: Tensor | None  # [B] float32; 1 on rows without top-p
    min_p: Tensor | None  # [B, 1] float32; 0 on rows without min-p
    seeds: Tensor | None  # [B] int64: the request's seed on seeded rows; None when none is
    seeded: Tensor | None  # [B] bool; only when seeded and unseeded random rows mix
    offsets: Tensor | None  # [B] int64: seeded rows' draw number (output length), else 0
    any_unseeded: bool  # some random row draws from the engine-wide generator
    disallowed: tuple[Tensor, Tensor] | None  # (rows [A], mask [A, V]): allowed_token_ids
    banned: TokenEntries | None  # set to -inf: bad words and min_tokens stop tokens
    logit_bias: TokenEntries | None
    penalties: Penalties | None
    max_num_logprobs: int | None  # largest `logprobs` asked for, None when none
    token_bitmask: tuple[Tensor | None, Tensor] | None = None
    """(rows [R], bitmask [R, W] int32): grammars' allowed tokens (`apply_token_bitmask`);
    rows None: every row, in order."""

    @property
    def needs_processing(self) -> bool:
        """Whether any logits processor runs before greedy/random selection."""
        return any(x is not None for x in (self.disallowed, self.banned, self.logit_bias,
                                           self.penalties, self.token_bitmask))

    @classmethod
    def from_states(cls, states: Sequence[SamplingState], vocab_size: int,
                    device: torch.device | str,
                    token_counts: TokenCounts | None = None,
                    token_bitmask: tuple[list[int], Tensor] | None = None) -> SamplingBatch:
        """The batch of `states`; `token_counts` keeps penalty statistics across steps
        (without it they are computed from the full token lists); `token_bitmask`: the rows
        that have a grammar and their bitmask (on any device)."""
        device = torch.device(device)
        draws = [s.draw for s in states]
        temperature, top_k, top_p, min_p = zip(*draws, strict=True) if draws else ((),) * 4
        all_greedy = not any(temperature)
        max_top_k = max((k for k in top_k if 0 < k < vocab_size), default=0)
        table = None if all_greedy else _rows(draws, torch.float32, device)
        seeded = [i for i, s in enumerate(states) if s.seed is not None]
        num_random = len(temperature) - temperature.count(0.0)
        seeds, seeded_mask, offsets = (None, None, None) if all_greedy else cls._seeds(
            states, seeded, num_random, device)
        params = [s.params for s in states]
        logprobs = [p.logprobs for p in params if p.logprobs is not None]
        if token_counts is None:
            token_counts = TokenCounts(vocab_size, device)
        return cls(
            vocab_size=vocab_size,
            all_greedy=all_greedy,
            temperature=None if table is None else table[:, 0],
            top_k=None if table is None or not max_top_k else cls._top_k(table[:, 1], vocab_size),
            max_top_k=max_top_k,
            top_p=table[:, 2] if table is not None and any(p < 1 for p in top_p) else None,
            min_p=table[:, 3:4] if table is not None and any(min_p) else None,
            seeds=seeds,
            seeded=seeded_mask,
            offsets=offsets,
            any_unseeded=len(seeded) < num_random,
            disallowed=cls._disallowed(states, vocab_size, device),
            banned=TokenEntries.build(cls._banned(states), device),
            logit_bias=TokenEntries.build(
                [(i, t, b) for i, p in enumerate(params) if p.logit_bias
                 for t, b in p.logit_bias.items()], device),
            penalties=Penalties.build(
                states, [i for i, s in enumerate(states) if s.penalties], token_counts),
            max_num_logprobs=max(logprobs) if logprobs else None,
            token_bitmask=None if token_bitmask is None else (
                None if token_bitmask[0] == list(range(len(states)))
                else _tensor(token_bitmask[0], torch.int64, device),
                token_bitmask[1].to(device, non_blocking=True)),
        )

    @staticmethod
    def _top_k(column: Tensor, vocab_size: int) -> Tensor:
        """Per-row k as int64, V where top-k is off (0) or keeps everything."""
        k = column.long()
        return k.masked_fill((k <= 0) | (k > vocab_size), vocab_size)

    @staticmethod
    def _seeds(states: Sequence[SamplingState], seeded: list[int], num_random: int,
               device: torch.device) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
        """(seeds, seeded mask, offsets) of the rows in `seeded`, in one copy; offsets are
        the output lengths, so a seeded request's n-th draw depends on (seed, n) only."""
        n = len(states)
        if not seeded:
            return None, None, torch.zeros(n, dtype=torch.int64, device=device)
        # Rows of an even length: each starts 16-byte aligned, as the sampling kernel was
        # compiled for (Triton specialises a kernel on its pointers' alignment).
        values = [[0] * (n + n % 2) for _ in range(3)]
        for i in seeded:
            values[0][i] = states[i].seed
            values[1][i] = len(states[i].output_token_ids)
            values[2][i] = 1
        table = _tensor(values, torch.int64, device)[:, :n]
        mixed = len(seeded) < num_random
        return table[0], table[2].bool() if mixed else None, table[1]

    @staticmethod
    def _disallowed(states: Sequence[SamplingState], vocab_size: int,
                    device: torch.device) -> tuple[Tensor, Tensor] | None:
        rows = [i for i, s in enumerate(states) if s.params.allowed_token_ids is not None]
        if not rows:
            return None
        entries = TokenEntries.build([(j, t) for j, i in enumerate(rows)
                                      for t in states[i].params.allowed_token_ids], device)
        mask = torch.ones(len(rows), vocab_size, dtype=torch.bool, device=device)
        mask.index_put_((entries.rows, entries.cols), mask.new_zeros(()))
        return _tensor(rows, torch.int64, device), mask

    @staticmethod
    def _banned(states: Sequence[SamplingState]) -> list[tuple[int, int]]:
        entries = []
        for i, state in enumerate(states):
            if not (state.params.bad_words_token_ids or state.params.min_tokens):
                continue
            tokens = state.banned_by_bad_words()
            if state.below_min_tokens:
                tokens += state.stop_token_ids_for_min_tokens
            entries += [(i, t) for t in tokens]
        return entries
