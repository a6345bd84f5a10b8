"""How often a front end may restart its dead engine cores (`pagoda serve --restart-engine`).

A core that dies once (a rare crash, the OOM killer) is worth a new one; a core that dies
again and again (a bad model file, a broken device) is a crash loop, and restarting it
only burns the machine while every request fails. So restarts are bounded: at most
`MAX_RESTARTS` within `RESTART_WINDOW_S`, counted over all the front end's cores; past
that, the engine stays dead and answers 503 `engine_dead` as it does without restarts.
"""

from __future__ import annotations

import time
from collections import deque

MAX_RESTARTS = 3
"""Restarts allowed within RESTART_WINDOW_S."""
RESTART_WINDOW_S = 600.0
"""Ten minutes: a core that needs a fourth restart within them is not coming back."""


class RestartBudget:
    """The restarts made recently; `take` says whether one more is allowed (and counts it)."""

    def __init__(self, max_restarts: int = MAX_RESTARTS, window_s: float = RESTART_WINDOW_S):
        self.max_restarts = max_restarts
        self.window_s = window_s
        self._times: deque[float] = deque()

    def take(self, now: float | None = None) -> bool:
        """True, and the restart counted, if fewer than `max_restarts` happened within the
        window before `now` (monotonic seconds; the clock's now by default)."""
        now = time.monotonic() if now is None else now
        while self._times and now - self._times[0] >= self.window_s:
            self._times.popleft()
        if len(self._times) >= self.max_restarts:
            return False
        self._times.append(now)
        return True

    def describe(self) -> str:
        return f"at most {self.max_restarts} restarts within {self.window_s:g} s"
