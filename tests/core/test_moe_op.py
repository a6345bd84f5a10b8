"""The `fused_moe` op: its reference means its docstring (checked against a float64 loop
over each token's choices), and the conformance kit catches the usual mistakes exactly
where its cases exercise them."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from pagoda.ops.reference import fused_moe as reference
from pagoda.testing import check_op, op_cases


def _by_definition(hidden, w13, w2, topk_weights, topk_ids) -> torch.Tensor:
    out = torch.zeros(hidden.shape, dtype=torch.float64)
    for t, row in enumerate(topk_ids.tolist()):
        for k, expert in enumerate(row):
            if expert < 0:
                continue
            gate, up = (w13[expert].double() @ hidden[t].double()).chunk(2)
            out[t] += topk_weights[t, k].double() * (w2[expert].double() @ (F.silu(gate) * up))
    return out


@pytest.mark.parametrize("case", op_cases("fused_moe", torch.float32), ids=lambda c: c.label)
def test_reference_is_the_weighted_sum_of_the_chosen_experts(case) -> None:
    got = reference(*case.args.values())
    torch.testing.assert_close(got.double(), _by_definition(*case.args.values()),
                               atol=1e-5, rtol=1e-5)


def _skipped_as_the_last_expert(hidden, w13, w2, topk_weights, topk_ids):
    """-1 taken as a Python index: the last expert instead of none."""
    return reference(hidden, w13, w2, topk_weights, topk_ids % w13.shape[0])


def _unweighted(hidden, w13, w2, topk_weights, topk_ids):
    return reference(hidden, w13, w2, torch.ones_like(topk_weights), topk_ids)


def _activation_on_up(hidden, w13, w2, topk_weights, topk_ids):
    """gate and up swapped: silu(up) * gate."""
    inter = w13.shape[1] // 2
    return reference(hidden, torch.cat([w13[:, inter:], w13[:, :inter]], dim=1), w2,
                     topk_weights, topk_ids)


@pytest.mark.parametrize(("impl", "marker"), [(_skipped_as_the_last_expert, "skipped=0."),
                                              (_unweighted, None), (_activation_on_up, None)])
def test_broken_impl_fails_exactly_where_expected(impl, marker) -> None:
    report = check_op("fused_moe", impl, torch.float32)
    failed = {f.split(": ", 1)[0] for f in report.failures}
    labels = {c.label for c in op_cases("fused_moe", torch.float32)}
    assert failed == (labels if marker is None else {lab for lab in labels if marker in lab})
