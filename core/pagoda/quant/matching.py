"""Which layers a checkpoint's quantization config covers: module names against targets
and ignore lists, as compressed-tensors and HF write them."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence


def matches(name: str, target: str) -> bool:
    """compressed-tensors' rule: "re:<pattern>" matches names the pattern matches from the
    start; "Linear" matches every linear layer; anything else is a module name."""
    if target.startswith("re:"):
        return re.match(target[3:], name) is not None
    return target == "Linear" or name == target


def listed(name: str, names: Iterable[str]) -> bool:
    """HF's `modules_to_not_convert` rule: the name, or a module it lies in, is listed."""
    return any(name == n or name.startswith(f"{n}.") or name.endswith(f".{n}") or
               (n.startswith("re:") and re.match(n[3:], name)) for n in names)


def one_answer(prefix: str, names: Sequence[str], answers: Sequence[object]) -> object:
    """The answer every checkpoint part of a fused layer got; parts that disagree (one
    quantized, another not, or two schemes) cannot share one weight."""
    first = answers[0]
    for name, answer in zip(names, answers, strict=True):
        if answer != first:
            raise ValueError(f"layer {prefix}: its fused parts are quantized differently "
                             f"({names[0]}: {first}; {name}: {answer})")
    return first
