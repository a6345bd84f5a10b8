"""Lazy references: plugins name heavy objects as "module:attr" strings."""

from __future__ import annotations

import importlib
from typing import Any

Target = Any
"""An object, or a "package.module:attribute" string naming one."""


def load_target(target: Target) -> Any:
    """Return `target` itself, or import the object a "module:attr" string names."""
    if not isinstance(target, str):
        return target
    module_name, sep, attr_path = target.partition(":")
    if not sep or not module_name or not attr_path:
        raise ValueError(f"Expected 'package.module:attribute', got {target!r}")
    obj: Any = importlib.import_module(module_name)
    for part in attr_path.split("."):
        obj = getattr(obj, part)
    return obj
