"""Session-wide test set-up that must come before any test module is imported.

Triton's CPU interpreter (TRITON_INTERPRET=1) must be chosen before `triton.language` is
first imported, not only before our kernels are defined: `triton.language`'s own jitted
helpers (`tl.zeros`, ...) are bound at that import. Test modules import transformers'
modeling code, which imports triton, at collection; so the choice is made here, before
any of them, for the whole session when no GPU is visible.
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
