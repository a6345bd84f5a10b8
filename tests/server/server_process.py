"""A real `pagoda serve` in a subprocess on a free localhost port, always stopped."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """`python -m pagoda.cli.main serve ARGS`; its output goes to `log`."""

    def __init__(self, args: list[str], log: Path, api_key: str | None = None,
                 startup_timeout: float = 150.0):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.api_key = api_key
        self.log = log
        env = {k: v for k, v in os.environ.items() if not k.startswith("PAGODA_")}
        with log.open("w") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "pagoda.cli.main", "serve", *args, "--host", "127.0.0.1",
                 "--port", str(self.port), "--log-level", "warning"],
                stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            self._wait_healthy(startup_timeout)
        except BaseException:
            self.stop()
            raise

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def output(self) -> str:
        return self.log.read_text()

    def _wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"pagoda serve exited ({self.process.returncode}):\n"
                                   f"{self.output()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"pagoda serve not healthy after {timeout} s:\n{self.output()}")

    def engine_core(self) -> psutil.Process:
        """The engine-core child process."""
        children = psutil.Process(self.process.pid).children()
        cores = [c for c in children if "spawn_main" in " ".join(c.cmdline())
                 and "resource_tracker" not in " ".join(c.cmdline())]
        assert len(cores) == 1, [c.cmdline() for c in children]
        return cores[0]

    def stop(self) -> None:
        """Ctrl-C, then a kill if it lingers; the engine core goes with it."""
        if self.process.poll() is None:
            children = psutil.Process(self.process.pid).children(recursive=True)
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            for child in children:
                if child.is_running():
                    child.kill()


def stream_payloads(http: httpx.Client, body: dict) -> list[str]:
    """The `data:` payloads of a streamed completion of `body`, read to the stream's end."""
    with http.stream("POST", "/v1/completions", json={**body, "stream": True}) as response:
        assert response.status_code == 200
        return [line[5:].strip() for line in response.iter_lines() if line.startswith("data:")]
