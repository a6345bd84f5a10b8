"""Where `pagoda serve`'s start-up time goes (benchmark F): what each import costs, then a
serve run whose every output line is stamped with the seconds since launch.

    python ci/startup_profile.py [--py-spy FILE] MODEL [serve arguments ...]

1. imports, each in a fresh interpreter: torch, triton, transformers (also in two at once:
   the engine core and the front end's tokenizer process start together), the front end's
   modules, the engine core's (`pagoda.engine.core_process`), the platform plugins'
   discovery; and the slowest modules under transformers' AutoConfig (`-X importtime`);
2. `pagoda serve MODEL ... --log-level debug` until /health answers, twice: with an empty
   Triton cache (a fresh machine's first start compiles every kernel), then with the cache
   that run filled; each log line with the seconds since launch. With `--py-spy FILE`, the
   warm run under `py-spy record --subprocesses --idle --format speedscope` (every process,
   waits included), and what each process did in each half second of it.

Prints a JSON line `{"cold_s": ..., "warm_s": ..., "imports_s": {...}}` last.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
"""The checkout, stripped from the profile's file names."""
IMPORTS = {
    "torch": "import torch",
    "torch + CUDA init": "import torch; torch.zeros(1, device='cuda')",
    "triton": "import triton",
    "transformers (AutoConfig)": "from transformers import AutoConfig",
    "front end (pagoda_server.app)": "import pagoda_server.app",
    "engine core (pagoda.engine.core_process)": "import pagoda.engine.core_process",
    "plugins discovered and loaded": "from pagoda.plugins.manager import get_registries; get_registries()",
}


def import_seconds(statement: str, at_once: int = 1) -> float | None:
    """Seconds `statement` takes in a fresh interpreter; the slowest of `at_once` started
    together (as `pagoda serve` starts its engine core beside the front end's tokenizer
    process, each importing torch and transformers)."""
    code = f"import time; t = time.perf_counter(); {statement}; print(time.perf_counter() - t)"
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True) for _ in range(at_once)]
    outs = [proc.communicate()[0] for proc in procs]
    if any(proc.returncode for proc in procs):
        return None
    return max(float(out.split()[-1]) for out in outs)


def slowest_imports(statement: str, count: int = 12) -> list[tuple[float, str]]:
    """(cumulative seconds, module) of the slowest imports of `statement`, outermost first
    among equals: `python -X importtime`'s lines are 'import time: self | cumulative | name'."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", statement],
                          capture_output=True, text=True)
    rows = []
    for line in proc.stderr.splitlines():
        parts = line.removeprefix("import time:").split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            rows.append((int(parts[1]) / 1e6, parts[2].rstrip()))
    return sorted(rows, reverse=True)[:count]


def serve_timeline(argv: list[str], triton_cache: str, port: int = 8797,
                   py_spy: str | None = None) -> float:
    env = dict(os.environ, PYTHONUNBUFFERED="1", TRITON_CACHE_DIR=triton_cache)
    spy = (["py-spy", "record", "--subprocesses", "--idle", "--threads", "--format", "speedscope",
            "--rate", "200", "--output", py_spy, "--"] if py_spy else [])
    start = time.monotonic()
    proc = subprocess.Popen([*spy, sys.executable, "-m", "pagoda.cli.main", "serve", *argv,
                             "--port", str(port), "--log-level", "debug"],
                            stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)
    lines: list[tuple[float, str]] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append((time.monotonic() - start, line.rstrip()))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    ready = None
    try:
        while ready is None and proc.poll() is None and time.monotonic() - start < 600:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                    ready = time.monotonic() - start
            except OSError:
                time.sleep(0.05)
    finally:
        if py_spy:  # as Ctrl-C would: serve shuts down, py-spy writes its profile
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.terminate()
        proc.wait(60)
        reader.join(5)
    for offset, line in lines:
        if "127.0.0.1" not in line:  # the polls of /health
            print(f"{offset:7.2f} s  {line[:160]}")
    if ready is None:
        raise RuntimeError(f"pagoda serve did not become ready (exit {proc.returncode})")
    print(f"ready after {ready:.2f} s", flush=True)
    return ready


def compiled_kernels(triton_cache: str, count: int = 15) -> None:
    """Print how many variants of each kernel a start compiled: Triton's cache holds one
    folder a compiled variant, with the kernel's metadata in `<name>.json`."""
    names: dict[str, int] = {}
    for folder in os.scandir(triton_cache):
        for entry in os.scandir(folder.path) if folder.is_dir() else ():
            if entry.name.endswith(".json") and not entry.name.startswith("__grp__"):
                name = entry.name.removesuffix(".json")
                names[name] = names.get(name, 0) + 1
    print(f"{sum(names.values())} kernel variants compiled, {len(names)} kernels; the most:")
    for name, n in sorted(names.items(), key=lambda item: -item[1])[:count]:
        print(f"  {n:4d}  {name}")


def spy_timeline(path: str, seconds: float = 0.5) -> None:
    """Each process's main thread in a py-spy speedscope profile, a line a `seconds` bin:
    the innermost Pagoda frame and the innermost frame of all (a module executing, a
    wait, a function), the bin's commonest pair. Each thread's samples are placed back
    from the end of the run (every process was sampled until the server stopped)."""
    with open(path) as file:
        data = json.load(file)
    frames = data["shared"]["frames"]

    def where(index: int) -> str:
        frame = frames[index]
        file_name = frame["file"].rsplit("site-packages/", 1)[-1].removeprefix(ROOT)
        return f"{frame['name']} ({file_name}:{frame['line']})"

    def pair(stack: list[int]) -> str:
        ours = [i for i in stack if "pagoda" in frames[i]["file"]]
        plain = [i for i in stack if not frames[i]["file"].startswith("<frozen")]
        return (f"{where(ours[-1]) if ours else '-'}  |  "
                f"{where(plain[-1]) if plain else where(stack[-1]) if stack else 'idle'}")

    profiles = [p for p in data["profiles"] if p["name"].split()[1] == p["name"].split()[3]]
    end = max(p["endValue"] for p in profiles)
    for profile in profiles:
        names = {frames[i]["name"] for stack in profile["samples"] for i in stack}
        files = {frames[i]["file"] for stack in profile["samples"] for i in stack}
        if any(file.endswith("resource_tracker.py") for file in files):
            continue
        role = ("engine core" if "run_engine_core" in names else
                "tokenizer child" if "_choose" in names else "front end")
        print(f"-- {profile['name'].split(' Thread')[0]}: {role}")
        offset = end - profile["endValue"]
        bins: dict[int, dict[str, int]] = {}
        t = 0.0
        for stack, weight in zip(profile["samples"], profile["weights"]):
            counts = bins.setdefault(int((offset + t) / seconds), {})
            label = pair(stack)
            counts[label] = counts.get(label, 0) + 1
            t += weight
        for b, counts in sorted(bins.items()):
            label, n = max(counts.items(), key=lambda item: item[1])
            print(f"  {b * seconds:6.1f} s  {n / sum(counts.values()):4.0%}  {label[:150]}")


def main() -> None:
    argv = sys.argv[1:]
    py_spy = None
    if argv[:1] == ["--py-spy"]:
        py_spy, argv = argv[1], argv[2:]
    imports = {}
    for name, statement in IMPORTS.items():
        imports[name] = import_seconds(statement)
        shown = "failed" if imports[name] is None else f"{imports[name]:.2f} s"
        print(f"import {name}: {shown}", flush=True)
    both = "transformers (AutoConfig)"
    imports[f"{both}, two interpreters at once"] = seconds = import_seconds(IMPORTS[both], 2)
    print(f"import {both}, two interpreters at once: "
          + ("failed" if seconds is None else f"{seconds:.2f} s"), flush=True)
    print("slowest modules under the engine core's reading of the model's config (cumulative):")
    for seconds, module in slowest_imports(IMPORTS["transformers (AutoConfig)"]):
        print(f"  {seconds:6.2f} s  {module}")
    cache = tempfile.mkdtemp(prefix="triton-cache-")
    print("== serve, empty Triton cache")
    cold = serve_timeline(argv, cache)
    compiled_kernels(cache)
    print("== serve again, the Triton cache warm")
    warm = serve_timeline(argv, cache, py_spy=py_spy)
    if py_spy:
        spy_timeline(py_spy)
    print(json.dumps({"cold_s": cold, "warm_s": warm, "imports_s": imports}))


if __name__ == "__main__":
    main()
