"""The batched LoRA ops' references mean their docstrings: each token's own adapter,
checked against a float64 loop over the tokens; slot -1 adds nothing."""

from __future__ import annotations

import pytest
import torch

from pagoda.ops.reference import lora_expand, lora_shrink
from pagoda.testing import op_cases


@pytest.mark.parametrize("case", op_cases("lora_shrink", torch.float32), ids=lambda c: c.label)
def test_shrink_is_each_tokens_adapter(case) -> None:
    x, a, slots = case.args["x"], case.args["a"], case.args["slots"]
    want = torch.zeros(x.shape[0], a.shape[1], dtype=torch.float64)
    for t, s in enumerate(slots.tolist()):
        if s >= 0:
            want[t] = a[s].double() @ x[t].double()
    torch.testing.assert_close(lora_shrink(x, a, slots).double(), want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("case", op_cases("lora_expand", torch.float32), ids=lambda c: c.label)
def test_expand_adds_each_tokens_adapter(case) -> None:
    y, h, b, slots = (case.args[k] for k in ("y", "h", "b", "slots"))
    want = y.double().clone()
    for t, s in enumerate(slots.tolist()):
        if s >= 0:
            want[t] += h[t].double() @ b[s].double()
    before = y.clone()
    torch.testing.assert_close(lora_expand(y, h, b, slots).double(), want, atol=1e-5,
                               rtol=1e-5)
    assert torch.equal(y, before)


def test_cases_cover_tokens_without_adapter_and_steps_without_any() -> None:
    slots = [c.args["slots"] for c in op_cases("lora_expand", torch.float32)]
    assert any((s == -1).any() and (s >= 0).any() for s in slots)
    assert any((s == -1).all() for s in slots)
