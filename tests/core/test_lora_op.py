"""The batched LoRA ops' references mean their docstrings: each token's own adapter,
checked against a float64 loop over the tokens; slot -1 adds nothing. `group_by_slot`
covers every token once, each tile within one slot's tokens."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pagoda.ops.lora_reference import group_by_slot, tiles_for
from pagoda.ops.reference import lora_expand, lora_shrink
from pagoda.testing import op_cases


@pytest.mark.parametrize("case", op_cases("lora_shrink", torch.float32), ids=lambda c: c.label)
def test_shrink_is_each_tokens_adapter(case) -> None:
    x, a, slots = case.args["x"], case.args["a"], case.args["slots"]
    want = torch.zeros(x.shape[0], a.shape[1], dtype=torch.float64)
    for t, s in enumerate(slots.tolist()):
        if s >= 0:
            want[t] = a[s].double() @ x[t].double()
    torch.testing.assert_close(lora_shrink(**case.args).double(), want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("case", op_cases("lora_expand", torch.float32), ids=lambda c: c.label)
def test_expand_adds_each_tokens_adapter(case) -> None:
    y, h, b, slots = (case.args[k] for k in ("y", "h", "b", "slots"))
    want = y.double().clone()
    for t, s in enumerate(slots.tolist()):
        if s >= 0:
            want[t] += h[t].double() @ b[s].double()
    before = y.clone()
    torch.testing.assert_close(lora_expand(**case.args).double(), want, atol=1e-5, rtol=1e-5)
    assert torch.equal(y, before)


def test_cases_cover_tokens_without_adapter_and_steps_without_any() -> None:
    slots = [c.args["slots"] for c in op_cases("lora_expand", torch.float32)]
    assert any((s == -1).any() and (s >= 0).any() for s in slots)
    assert any((s == -1).all() for s in slots)


@pytest.mark.parametrize("tile", [1, 4, 64])
def test_group_by_slot_tiles_cover_each_token_once_within_its_slot(tile: int) -> None:
    gen = torch.Generator().manual_seed(tile)
    slots = torch.randint(-1, 5, (150,), generator=gen).numpy()
    order, tiles = group_by_slot(slots, 5, tile=tile)
    assert tiles.shape == (150 // tile + 6, 3)
    seen = []
    for slot, first, count in tiles.tolist():
        assert 0 <= count <= tile
        tokens = order[first : first + count].tolist()
        assert all(slots[t] == slot for t in tokens)
        seen += tokens
    assert sorted(seen) == list(range(150))


def test_the_first_tiles_cover_a_steps_tokens() -> None:
    """A buffer whose tokens past the step's are of none: `tiles_for` rows suffice."""
    gen = torch.Generator().manual_seed(0)
    for tokens in (1, 63, 64, 65, 200):
        slots = np.full(1000, -1)
        slots[:tokens] = torch.randint(-1, 4, (tokens,), generator=gen).numpy()
        order, tiles = group_by_slot(slots, 4)
        covered = {t for _, first, count in tiles[: tiles_for(tokens, 4)].tolist()
                   for t in order[first : first + count].tolist()}
        assert set(range(tokens)) <= covered
