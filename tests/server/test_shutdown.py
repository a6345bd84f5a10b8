"""SIGTERM: the server stops accepting, lets the requests in flight finish within
--shutdown-timeout, aborts the rest, and exits 0 with its engine core gone."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import httpx
import psutil

from tests.server.conftest import MODEL, TINY_SERVER_ARGS
from tests.server.server_process import ServerProcess


def _stream(url: str, max_tokens: int, into: dict) -> None:
    body = {"model": MODEL, "prompt": "w5 w6", "max_tokens": max_tokens, "ignore_eos": True,
            "stream": True}
    try:
        with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=60) as response:
            into["status"] = response.status_code
            into["body"] = "".join(response.iter_text())
    except httpx.HTTPError as exc:
        into["error"] = exc


def _sigterm_while_streaming(tmp_path: Path, timeout: str, max_tokens: int) -> tuple[dict, float]:
    server = ServerProcess([str(_tiny(tmp_path)), *TINY_SERVER_ARGS, "--shutdown-timeout",
                            timeout], tmp_path / "serve.log")
    core = server.engine_core()
    result: dict = {}
    client = threading.Thread(target=_stream, args=(server.url, max_tokens, result))
    client.start()
    deadline = time.monotonic() + 30
    while "status" not in result and time.monotonic() < deadline:
        time.sleep(0.01)
    start = time.monotonic()
    server.process.send_signal(signal.SIGTERM)
    try:
        assert server.process.wait(60) == 0, server.output()
    finally:
        server.stop()
    took = time.monotonic() - start
    client.join(60)
    assert not core.is_running() or core.status() == psutil.STATUS_ZOMBIE
    try:
        httpx.get(f"{server.url}/health", timeout=2)
        raise AssertionError("the server still answers after SIGTERM")
    except httpx.HTTPError:
        pass
    return result, took


def _tiny(tmp_path: Path) -> Path:
    from tests.engine.tiny_models import make_checkpoint, tiny_configs
    return make_checkpoint(tmp_path / "model", tiny_configs()["llama"])


def test_sigterm_lets_a_short_request_finish(tmp_path: Path) -> None:
    result, _ = _sigterm_while_streaming(tmp_path, "20", max_tokens=40)
    assert result.get("status") == 200
    assert result["body"].rstrip().endswith("data: [DONE]"), result


def test_sigterm_aborts_what_outlasts_the_timeout(tmp_path: Path) -> None:
    result, took = _sigterm_while_streaming(tmp_path, "0.5", max_tokens=100_000)
    assert "data: [DONE]" not in result.get("body", "")  # cut, not finished
    assert took < 30
