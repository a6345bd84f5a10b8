"""pagoda-rocm tests. No test here needs an AMD GPU, and none pretends to have one: the
probe reads fake sysfs trees, the kernels are compiled for AMD targets without running,
and the ROCm kernel wrappers run in Triton's CPU interpreter, which must be chosen before
the kernels are imported."""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
