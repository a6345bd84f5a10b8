"""How Pagoda's processes log: one format, set up by the CLI and by the engine-core process
(a spawned interpreter, which inherits no logging configuration)."""

from __future__ import annotations

import logging

LOG_FORMAT = "%(levelname)s %(asctime)s.%(msecs)03d %(name)s: %(message)s"
DATE_FORMAT = "%m-%d %H:%M:%S"
"""Month-day and wall-clock time to the millisecond: start-up phases read off the log."""


def _pagoda_or_warning(record: logging.LogRecord) -> bool:
    """Pagoda's own records (pagoda, pagoda_server, pagoda_<platform>) at every level, other
    libraries' from WARNING up: httpx, for one, logs each request it makes at INFO."""
    return record.levelno >= logging.WARNING or record.name.startswith("pagoda")


def configure(level: int | str = logging.INFO) -> None:
    """Log to stderr at `level` in Pagoda's format (a no-op where logging is set up)."""
    root = logging.getLogger()
    if root.handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(LOG_FORMAT, DATE_FORMAT))
    handler.addFilter(_pagoda_or_warning)
    root.addHandler(handler)
    root.setLevel(level)
