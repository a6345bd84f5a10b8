"""What the front end does when one of its engine cores dies, and whether it takes new
requests meanwhile.

Without restarts, the first core to die ends the engine: every request in flight fails with
EngineDeadError, and so does every later one. With them (`restart_engine`), a dead core
fails only its own requests, with the retryable EngineRestartingError, and a new core of the
same config starts in its place on a thread of its own. The engine is dead all the same once
the restart budget is spent (`pagoda.frontend.restarts`), a new core fails to start, or the
cores are shut down.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from pagoda.frontend.core_client import EngineDeadError, EngineRestartingError
from pagoda.frontend.engine_cores import EngineCores
from pagoda.frontend.request_streams import Stream
from pagoda.frontend.restarts import RestartBudget

logger = logging.getLogger(__name__)


class CoreSupervisor:
    """The health of one front end's engine cores: it hears of each core's death, fails
    the requests that died with it, restarts the core if it may, and says whether a new
    request would be taken.

    It shares the front end's lock and tells the front end what happened through callbacks
    run with that lock held: `core_down(core)` (the core died and a new one is starting)
    and `engine_dead()` each drop the requests that died and return their streams, which
    the supervisor then fails; `core_replaced(core)` says a new core serves in a dead
    one's place.
    """

    def __init__(self, lock: threading.Lock, budget: RestartBudget | None, *,
                 core_down: Callable[[int], list[Stream]],
                 engine_dead: Callable[[], list[Stream]],
                 core_replaced: Callable[[int], None]):
        """`budget`: how often dead cores may be restarted; None: a dead core ends the
        engine."""
        self._lock = lock
        self._budget = budget
        self._core_down = core_down
        self._engine_dead = engine_dead
        self._core_replaced = core_replaced
        self._watched: EngineCores | None = None
        self._dead_reason: str | None = None
        self._closing = False

    def watch(self, cores: EngineCores) -> None:
        """Supervise `cores` (made with `on_death` as their death callback) from now on;
        a death reported before (a core failing to start) is left to their constructor,
        which raises it."""
        self._watched = cores

    @property
    def _cores(self) -> EngineCores:
        assert self._watched is not None, "watch() must run first"
        return self._watched

    # ---- the engine's state -----------------------------------------------------------

    @property
    def errored(self) -> bool:
        """True once the engine is dead for good (a core died and is not restarted, or
        the engine was shut down)."""
        return self._dead_reason is not None

    @property
    def is_healthy(self) -> bool:
        """True while the engine takes new requests: alive, and not every core down."""
        return self.unavailable() is None

    @property
    def dead_reason(self) -> str | None:
        """Why the engine is dead (the first reason given), or None while it is not."""
        return self._dead_reason

    @property
    def restarting_cores(self) -> list[int]:
        """The cores that died and are being replaced."""
        with self._lock:
            return sorted(self._cores.down)

    def unavailable(self) -> EngineDeadError | None:
        """Why a new request would be refused now: EngineDeadError (the engine is dead),
        EngineRestartingError (every core is down, a new one starting); None: it would
        be taken."""
        if self._dead_reason is not None:
            return EngineDeadError(self._dead_reason)
        down = self._cores.down
        if down and len(down) == len(self._cores.clients):
            return EngineRestartingError(
                f"the engine core died and a new one is starting (core"
                f"{'s' * (len(down) > 1)} {', '.join(map(str, sorted(down)))}): retry shortly")
        return None

    def raise_if_unavailable(self) -> None:
        """Raise `unavailable()`'s error, if there is one."""
        error = self.unavailable()
        if error is not None:
            raise error

    def send_failed(self, error: EngineDeadError) -> EngineDeadError:
        """What a request raises whose core turned out dead as it was sent: `error`, or
        the retryable EngineRestartingError when a new core will take the dead one's
        place."""
        if self._budget is None or self._closing:
            return error
        return EngineRestartingError(f"{error}; a new engine core is starting: retry shortly")

    def shutdown(self) -> None:
        """Stop the cores for good: none is restarted from now on (one starting fails), so
        the requests in flight fail with EngineDeadError."""
        self._closing = True
        self._cores.shutdown()

    # ---- a core's death ---------------------------------------------------------------

    def on_death(self, core: int, reason: str) -> None:
        """Reader thread (or shutdown) of `core`: fail the requests in flight. Without
        restarts (or past their budget), the engine is dead: every request fails, the first
        core to go gives the reason. With them, only `core`'s requests fail (retryably),
        and a new core starts in its place."""
        with self._lock:
            if self._watched is None:
                return  # a core failing to start: the cores' constructor raises its error
            if core in self._cores.down:
                return  # a successor failing to start: the restart reports it
            restart = (self._dead_reason is None and self._budget is not None
                       and not self._closing and self._budget.take())
            if restart:
                self._cores.down.add(core)
                streams = self._core_down(core)
        if not restart:
            if self._budget is not None and not self._closing:
                reason += f"; not restarted: {self._budget.describe()} were made"
            self._die(reason)
            return
        logger.warning("engine core %d: %s; starting a new one", core, reason)
        threading.Thread(target=self._restart, args=(core, reason), daemon=True,
                         name=f"pagoda-core-restart-{core}").start()
        error = EngineRestartingError(f"{reason}; a new engine core is starting: retry "
                                      f"shortly")
        for stream in streams:
            stream.put(error)

    def _die(self, reason: str) -> None:
        """The engine is dead for good: every request in flight fails, and every later one
        (the first reason given is kept)."""
        with self._lock:
            if self._dead_reason is None:
                self._dead_reason = reason
            reason = self._dead_reason
            streams = self._engine_dead()
        for stream in streams:
            stream.put(EngineDeadError(reason))

    def _restart(self, core: int, reason: str) -> None:
        """A thread of its own: start a new core in place of `core` and put it in service;
        if it fails to start, the engine is dead."""
        try:
            client = self._cores.restart(core)
        except Exception as exc:
            self._die("the engine core was shut down" if self._closing
                      else f"{reason}; its restart failed: {exc}")
            return
        with self._lock:
            self._cores.replace(core, client)
            self._core_replaced(core)
        logger.warning("engine core %d is serving again (pid %s)", core, client.pid)
