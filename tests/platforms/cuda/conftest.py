"""pagoda-cuda tests. Without a GPU the Triton kernels they touch run in Triton's CPU
interpreter, which must be chosen before the kernels are imported."""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
