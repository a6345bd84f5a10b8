"""How Pagoda's processes log: one format, set up by the CLI and by the engine-core process
(a spawned interpreter, which inherits no logging configuration)."""

from __future__ import annotations

import logging

LOG_FORMAT = "%(levelname)s %(name)s: %(message)s"


def configure(level: int | str = logging.INFO) -> None:
    """Log to stderr at `level` in Pagoda's format (a no-op where logging is set up)."""
    logging.basicConfig(level=level, format=LOG_FORMAT)
