"""A platform package certifies itself with `pagoda.testing.pytest_plugin`, as a third party
would: a conftest opting in, the ready-made suite, `--pagoda-platform NAME`."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from pagoda.ops import OPS
from pagoda.testing.pytest_plugin import platform_name
from pagoda_template.plugin import OPS as TEMPLATE_OPS

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
    result = _pytest(vendor_tests, "-v", "--pagoda-platform", "template", "--pagoda-seed", "7")
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "pagoda platform: template (seed 7)" in out
    outcomes = dict(re.findall(r"^\S+?::(\S+) (PASSED|SKIPPED|FAILED|ERROR)\b", out, re.M))
    # float16 is skipped: the template platform does not list it; core's references are
    # skipped: on the host they would be compared with themselves.
    dtypes = ("float32", "bfloat16")
    assert {t for t, o in outcomes.items() if o == "PASSED"} == {
        f"test_kernel_provider_matches_reference[{op}-template/template-{d}]"
        for op in TEMPLATE_OPS for d in dtypes
    } | {f"test_attention_backend_matches_reference[template/template-{d}]" for d in dtypes} | {
        f"test_ops_resolve[{d}]" for d in dtypes
    } | {"test_platform_describes_itself", "test_platform_memory_is_consistent",
         "test_preferred_attention_backends_are_registered", "test_every_plugin_loaded",
         "test_greedy_generation_matches_cpu"}
    skipped = {t for t, o in outcomes.items() if o == "SKIPPED"}
    assert skipped == {t for t in outcomes
                       if re.search(r"\bfloat16\]", t) or "core/reference" in t}
    # core's references: every op but the quantized linears (no core fallback), and the
    # attention reference, in three dtypes
    references = sum(not spec.optional for spec in OPS.values()) + 1
    assert len(skipped) == 3 * references + len(TEMPLATE_OPS) + 2
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
