"""The server and its load generator run on uvloop where it is installed (a dependency of
pagoda-server off Windows), and on asyncio's own loop otherwise."""

from __future__ import annotations

import asyncio
import builtins

import pytest

from pagoda_server import event_loop


async def _loop_module() -> str:
    await asyncio.sleep(0)
    return type(asyncio.get_running_loop()).__module__


def test_runs_on_uvloop() -> None:
    pytest.importorskip("uvloop")
    assert event_loop.run(_loop_module()).startswith("uvloop")


def test_falls_back_to_asyncio_without_uvloop(monkeypatch) -> None:
    real_import = builtins.__import__

    def no_uvloop(name, *args, **kwargs):
        if name == "uvloop":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_uvloop)
    assert event_loop.run(_loop_module()).startswith("asyncio")
