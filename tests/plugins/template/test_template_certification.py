"""A platform package certifies itself with `pagoda.testing.pytest_plugin`, as a third party
would: a conftest opting in, the ready-made suite, `--pagoda-platform NAME`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pagoda.testing.pytest_plugin import platform_name

CONFTEST = 'pytest_plugins = ["pagoda.testing.pytest_plugin"]\n'
SUITE = "from pagoda.testing.suite import *  # noqa: F401,F403\n"


@pytest.fixture(scope="module")
def vendor_tests(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("vendor_tests")
    (root / "conftest.py").write_text(CONFTEST)
    (root / "test_pagoda_conformance.py").write_text(SUITE)
    return root


def _pytest(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-rs", "-p", "no:cacheprovider", str(root), *args],
        capture_output=True, text=True, timeout=300, cwd=root)


def test_suite_certifies_template(vendor_tests: Path) -> None:
    result = _pytest(vendor_tests, "--pagoda-platform", "template", "--pagoda-seed", "7")
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "pagoda platform: template (seed 7)" in out
    # (14 providers + 2 backends + op resolution) x 3 dtypes + 3 platform checks; float16
    # is skipped: the template platform does not list it.
    assert "37 passed, 17 skipped" in out
    assert "platform 'template' does not support torch.float16" in out


class _Config:
    """The one thing `platform_name` reads from pytest's config."""

    def __init__(self, platform: str | None):
        self.platform = platform

    def getoption(self, name: str, default: object = None) -> object:
        return self.platform if name == "pagoda_platform" else default


@pytest.mark.parametrize(
    ("platform", "message"),
    [(None, "need --pagoda-platform NAME"), ("acme", "pip install pagoda-acme")],
    ids=["missing", "not-installed"],
)
def test_suite_refuses_to_run_without_a_usable_platform(
    platform: str | None, message: str
) -> None:
    with pytest.raises(pytest.fail.Exception, match=message):
        platform_name(_Config(platform))  # type: ignore[arg-type]


def test_platform_name_accepts_any_case() -> None:
    assert platform_name(_Config("Template")) == "template"  # type: ignore[arg-type]
