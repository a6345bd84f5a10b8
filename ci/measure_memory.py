"""Resident memory of `pagoda serve`: the front end and each engine core, after start-up
and after a few chat requests, with their peaks.

    python ci/measure_memory.py [--requests 8] [--json out.json] [-- SERVE ARGS...]

With no serve arguments it serves the embedded default model (SmolLM2-135M GGUF). It
also says whether the front end had imported torch by the end (libtorch in its
memory maps). Linux only (reads /proc).
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from pagoda.bench.memory import peak_resident_bytes, resident_bytes

_SERVE = "import sys; from pagoda.cli.main import main; sys.exit(main())"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _children(pid: int) -> list[int]:
    pids = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        pids += [int(p) for p in (task / "children").read_text().split()]
    return pids


def _engine_cores(pid: int) -> list[int]:
    """The server's engine-core processes (spawned: `multiprocessing.spawn` in their
    command line, unlike the resource tracker)."""
    cores = []
    for child in _children(pid):
        cmdline = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ")
        if b"spawn_main" in cmdline:
            cores.append(child)
    return cores


def _imports_torch(pid: int) -> bool:
    return "libtorch" in Path(f"/proc/{pid}/maps").read_text()


def _get(url: str, timeout: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read()


def _chat(url: str, text: str) -> None:
    body = json.dumps({"model": json.loads(_get(url + "/v1/models"))["data"][0]["id"],
                       "messages": [{"role": "user", "content": text}],
                       "max_tokens": 64, "temperature": 0}).encode()
    request = urllib.request.Request(url + "/v1/chat/completions", body,
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        json.loads(response.read())


def _snapshot(server: int) -> dict[str, dict[str, int | None]]:
    pids = {"frontend": server} | {f"engine_core_{i}": p
                                   for i, p in enumerate(_engine_cores(server))}
    return {name: {"rss": resident_bytes(pid), "peak": peak_resident_bytes(pid)}
            for name, pid in pids.items()}


def _wait_healthy(url: str, process: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"pagoda serve exited with {process.returncode}")
        try:
            _get(url + "/health", timeout=1.0)
            return
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"pagoda serve was not healthy after {timeout:.0f} s")


def measure(serve_args: list[str], requests: int, timeout: float = 300.0) -> dict[str, object]:
    """Start `pagoda serve SERVE_ARGS`, measure, stop it; the figures in bytes."""
    port = _free_port()
    process = subprocess.Popen([sys.executable, "-c", _SERVE, "serve", *serve_args,
                                "--host", "127.0.0.1", "--port", str(port)],
                               stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, process, timeout)
        started = _snapshot(process.pid)
        for i in range(requests):
            _chat(url, f"Write a short poem about the number {i}.")
        return {"serve_args": serve_args, "requests": requests,
                "frontend_imports_torch": _imports_torch(process.pid),
                "after_start": started, "after_requests": _snapshot(process.pid)}
    finally:
        process.terminate()
        process.wait(30)


def _print(result: dict[str, object]) -> None:
    print(f"pagoda serve {' '.join(result['serve_args']) or '(the default model)'}; "  # type: ignore[arg-type]
          f"front end imports torch: {result['frontend_imports_torch']}")
    after = result["after_requests"]
    for name, start in result["after_start"].items():  # type: ignore[union-attr]
        end = after[name]  # type: ignore[index]
        print(f"  {name:<14} after start {start['rss'] / 2**20:7.0f} MiB; after "
              f"{result['requests']} requests {end['rss'] / 2**20:7.0f} MiB, "
              f"peak {end['peak'] / 2**20:7.0f} MiB")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=8, help="chat requests to send")
    parser.add_argument("--json", help="also write the figures (bytes) to this file")
    parser.add_argument("serve_args", nargs="*", help="arguments of pagoda serve (after --)")
    args = parser.parse_args()
    result = measure(args.serve_args, args.requests)
    _print(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
