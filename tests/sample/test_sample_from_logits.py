"""The reference `sample_from_logits` op: its Philox stream, greedy rows, and draws that
follow softmax(logits / temperature) and depend only on (row, seed, offset)."""

import math

import torch

from pagoda.ops.reference import philox4x32, sample_from_logits, sampling_uniforms

CHI2_DF5_P001 = 20.52  # chi-square critical value, 5 degrees of freedom, p = 0.001

# Random123's known-answer vectors for Philox4x32-10: (counter, key) -> output.
PHILOX_KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


def _words(values: tuple[int, ...]) -> tuple[torch.Tensor, ...]:
    return tuple(torch.tensor([v]) for v in values)


def test_philox_matches_the_known_answers():
    for counter, key, expected in PHILOX_KAT:
        got = philox4x32(_words(counter), _words(key))
        assert tuple(int(w) for w in got) == expected


def test_uniforms_are_open_interval_and_exact_in_float32():
    seeds = torch.tensor([0, -1, 2**63 - 1, 12345])
    offsets = torch.tensor([0, 2**40 + 3, 7, 2**32])
    u = sampling_uniforms(seeds, offsets, 4099)
    assert u.dtype == torch.float32 and u.shape == (4, 4099)
    assert u.min() > 0 and u.max() < 1
    k = u.double() * 2**23 - 0.5
    assert torch.equal(k, k.round())  # (k + 0.5) / 2**23 with integer k
    assert abs(u.mean().item() - 0.5) < 0.01


def test_uniforms_depend_only_on_seed_offset_and_token():
    seeds, offsets = torch.tensor([3, 3, 4, 3]), torch.tensor([9, 10, 9, 9])
    u = sampling_uniforms(seeds, offsets, 50)
    assert torch.equal(u[0], u[3])  # same (seed, offset), another row
    assert not torch.equal(u[0], u[1]) and not torch.equal(u[0], u[2])
    alone = sampling_uniforms(seeds[1:2], offsets[1:2], 50)
    assert torch.equal(alone[0], u[1])
    assert torch.equal(sampling_uniforms(seeds, offsets, 13), u[:, :13])  # V only truncates


def test_greedy_rows_take_the_first_largest_logit():
    logits = torch.tensor([[0.0, 2.0, 2.0, 1.0], [-math.inf] * 4, [5.0, -1.0, 5.0, 5.0]])
    tokens = sample_from_logits(logits, torch.zeros(3), torch.arange(3), torch.zeros(3))
    assert tokens.tolist() == [1, 0, 0]
    assert tokens.dtype == torch.int64


def test_draws_follow_the_temperature_scaled_softmax():
    logits = torch.tensor([1.0, 0.5, 0.0, -0.5, 2.0, 0.3])
    temperature, rows = 0.7, 20000
    expected = torch.softmax(logits / temperature, dim=-1).double() * rows
    by_seed = sample_from_logits(logits.expand(rows, -1), torch.full((rows,), temperature),
                                 torch.arange(rows), torch.zeros(rows, dtype=torch.int64))
    by_step = sample_from_logits(logits.expand(rows, -1), torch.full((rows,), temperature),
                                 torch.full((rows,), 42), torch.arange(rows))
    for tokens in (by_seed, by_step):
        counts = torch.bincount(tokens, minlength=6).double()
        assert float(((counts - expected) ** 2 / expected).sum()) < CHI2_DF5_P001


def test_masked_tokens_never_win_and_rows_are_independent():
    rows = 3000
    logits = torch.full((rows, 5), -math.inf)
    logits[:, 3] = -50.0  # tiny but the only finite logit
    tokens = sample_from_logits(logits, torch.full((rows,), 0.01), torch.arange(rows),
                                torch.zeros(rows, dtype=torch.int64))
    assert (tokens == 3).all()
    mixed = torch.randn(6, 40, generator=torch.Generator().manual_seed(1))
    temperature = torch.tensor([0.0, 1.0, 0.5, 0.0, 2.0, 1.0])
    seeds, offsets = torch.arange(6) * 1000, torch.arange(6)
    batch = sample_from_logits(mixed, temperature, seeds, offsets)
    for i in range(6):
        one = sample_from_logits(mixed[i : i + 1], temperature[i : i + 1], seeds[i : i + 1],
                                 offsets[i : i + 1])
        assert one.item() == batch[i].item()
