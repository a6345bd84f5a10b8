"""torch-xla's persistent compilation cache, and the count of compilations so far."""

from __future__ import annotations

import logging
from pathlib import Path

import torch_xla
import torch_xla.debug.metrics as met
import torch_xla.runtime as xr

logger = logging.getLogger(__name__)


def initialize_compile_cache(path: Path | None) -> bool:
    """Keep compiled programs in `path` across processes; whether the cache is now on.

    torch-xla accepts this only before the process's first XLA computation; later (a
    second engine in one process, a test) it is left as it is.
    """
    if path is None:
        return False
    if torch_xla._XLAC._xla_computation_cache_is_initialized():
        logger.info("XLA already computed in this process: persistent cache %s not set", path)
        return False
    path.mkdir(parents=True, exist_ok=True)
    xr.initialize_cache(str(path))
    return True


def compilations() -> int:
    """XLA programs compiled in this process so far (torch-xla's CompileTime metric)."""
    data = met.metric_data("CompileTime")
    return int(data[0]) if data else 0
