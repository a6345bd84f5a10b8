"""The conformance suite run as another package runs it, from its own test directory
(`pytest_plugins = ["pagoda.testing.pytest_plugin"]`, `from pagoda.testing.suite import *`,
`pytest --pagoda-platform NAME`): it certifies `cpu`, and it fails a shoddy third-party
platform loudly, on each broken part and on nothing else."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cli_harness import CliResult, run_python, write_plugin_distribution

from pagoda.ops import OPS
from pagoda.plugins import load_target
from pagoda.testing import attention_backends, kernel_providers

DTYPES = ("float32", "bfloat16", "float16")
PLATFORM_TESTS = {"test_platform_describes_itself", "test_platform_memory_is_consistent",
                  "test_preferred_attention_backends_are_registered", "test_every_plugin_loaded",
                  "test_greedy_generation_matches_cpu"}

CONFTEST = 'pytest_plugins = ["pagoda.testing.pytest_plugin"]\n'
SUITE = "from pagoda.testing.suite import *  # noqa: F401,F403\n"

SHODDY = """
    from pagoda.plugins import (PLUGIN_API_VERSION, AttentionBackendSpec, KernelProvider,
                                PlatformProbe, PluginInfo, hookimpl)

    IMPL = "fake_pagoda_shoddy_impl"

    @hookimpl
    def pagoda_plugin_info():
        return PluginInfo("shoddy", "0.1", PLUGIN_API_VERSION, package="pagoda-fake-shoddy",
                          verified_on="nothing: a test double")

    @hookimpl
    def pagoda_platform_probe():
        return [PlatformProbe("shoddy", usable=True, score=0, devices=("host CPU",))]

    @hookimpl
    def pagoda_platform_factory(name):
        if name == "shoddy":
            from fake_pagoda_shoddy_impl import ShoddyPlatform
            return ShoddyPlatform()

    @hookimpl
    def pagoda_kernel_providers():
        return [KernelProvider(op, name, f"{IMPL}:{impl}", ("shoddy",), 5)
                for op, name, impl in (("rms_norm", "good", "rms_norm"),
                                       ("silu_and_mul", "swapped", "swapped_silu_and_mul"),
                                       ("rms_nrom", "typo", "rms_norm"))]

    @hookimpl
    def pagoda_attention_backends():
        return [AttentionBackendSpec("forgetful", f"{IMPL}:Forgetful", ("shoddy",), 5)]
"""

SHODDY_IMPL = """
    import torch
    from pagoda.attention import reference as attention_reference
    from pagoda.attention.reference import ReferenceAttentionBackend, ReferenceAttentionImpl
    from pagoda.ops import reference
    from pagoda.platforms import MemoryInfo, Platform

    class ShoddyPlatform(Platform):
        name = "shoddy"
        device_type = "cpu"
        supported_dtypes = (torch.float32,)
        distributed_backend = "gloo"
        preferred_attention_backends = ("forgetful",)

        def device_count(self):
            return 1

        def device_name(self, index=0):
            return "host CPU"

        def memory_info(self, index=0):
            return MemoryInfo(8 << 30, 4 << 30)

        def torch_device(self, index=0):
            return torch.device("cpu")

    def rms_norm(x, weight, eps):
        return reference.rms_norm(x, weight, eps)

    def swapped_silu_and_mul(x):
        return reference.silu_and_mul(torch.cat(x.chunk(2, dim=-1)[::-1], dim=-1))

    class ForgetfulImpl(ReferenceAttentionImpl):
        # Attends to this step's keys only: right for a first prefill, wrong afterwards.
        def forward(self, query, key, value, kv_cache, metadata):
            attention_reference.write_kv_cache(key, value, kv_cache, metadata.slot_mapping)
            starts = metadata.query_start_loc
            q_lens = (starts[1:] - starts[:-1]).to(torch.int32)
            return attention_reference.paged_attention(query, kv_cache, metadata.block_tables,
                                                       starts, q_lens, self.scale,
                                                       self.sliding_window,
                                                       self.logits_soft_cap)

    class Forgetful(ReferenceAttentionBackend):
        name = "forgetful"

        @classmethod
        def get_impl_cls(cls):
            return ForgetfulImpl
"""

REFUSED = """
    from pagoda.plugins import PLUGIN_API_VERSION, PluginInfo, hookimpl

    @hookimpl
    def pagoda_plugin_info():
        return PluginInfo("future", "7.0", PLUGIN_API_VERSION + 1)
"""


def _run_suite(root: Path, platform: str, pythonpath: Path | None = None) -> CliResult:
    tests = root / "vendor_tests"
    tests.mkdir()
    (tests / "conftest.py").write_text(CONFTEST)
    (tests / "test_pagoda_conformance.py").write_text(SUITE)
    return run_python(["-m", "pytest", "-v", "-rs", "-p", "no:cacheprovider", str(tests),
                       "--pagoda-platform", platform], pythonpath, cwd=tests)


def _outcomes(result: CliResult) -> dict[str, str]:
    """Test name with its id -> PASSED, FAILED, SKIPPED or ERROR, from pytest -v."""
    found = re.findall(r"^\S+?::(\S+) (PASSED|FAILED|SKIPPED|ERROR)\b", result.stdout, re.M)
    return dict(found)


def test_suite_certifies_cpu(tmp_path: Path) -> None:
    result = _run_suite(tmp_path, "cpu")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    outcomes = _outcomes(result)
    # core's references on the host would only be compared with themselves: skipped, also
    # where pagoda-cpu registers a reference as its own kernel
    own = [e for e in kernel_providers("cpu") if e.plugin == "cpu"]
    kernels = [e.id for e in own if load_target(e.provider.impl) is not OPS[e.op].reference]
    backends = [b.id for b in attention_backends("cpu") if b.plugin == "cpu"]
    assert kernels and backends
    passed = {f"test_kernel_provider_matches_reference[{k}-{d}]"
              for k in kernels for d in DTYPES} | {
        f"test_attention_backend_matches_reference[{b}-{d}]" for b in backends for d in DTYPES
    } | {f"test_ops_resolve[{d}]" for d in DTYPES} | PLATFORM_TESTS
    assert {t for t, o in outcomes.items() if o == "PASSED"} == passed
    assert {o for t, o in outcomes.items() if t not in passed} == {"SKIPPED"}
    assert "core's reference on the host is what every check compares with" in result.stdout


@pytest.fixture(scope="module")
def shoddy(tmp_path_factory: pytest.TempPathFactory) -> CliResult:
    root = tmp_path_factory.mktemp("shoddy")
    plugins = root / "site"
    plugins.mkdir()
    write_plugin_distribution(plugins, "shoddy", SHODDY,
                              modules={"fake_pagoda_shoddy_impl": SHODDY_IMPL})
    write_plugin_distribution(plugins, "future", REFUSED)
    result = _run_suite(root, "shoddy", plugins)
    assert result.returncode == 1, result.stdout[-4000:] + result.stderr[-2000:]
    return result


SHODDY_FAILURES = {
    "test_kernel_provider_matches_reference[silu_and_mul-shoddy/swapped-float32]",
    "test_kernel_provider_matches_reference[rms_nrom-shoddy/typo-float32]",
    "test_attention_backend_matches_reference[shoddy/forgetful-float32]",
    "test_greedy_generation_matches_cpu",
    "test_every_plugin_loaded",
}


def test_fails_exactly_the_broken_parts(shoddy: CliResult) -> None:
    outcomes = _outcomes(shoddy)
    assert {test for test, outcome in outcomes.items() if outcome == "FAILED"} == SHODDY_FAILURES
    passed = {test for test, outcome in outcomes.items() if outcome == "PASSED"}
    assert passed == {"test_kernel_provider_matches_reference[rms_norm-shoddy/good-float32]",
                      "test_ops_resolve[float32]"} | PLATFORM_TESTS - SHODDY_FAILURES


def test_covers_every_registered_provider(shoddy: CliResult) -> None:
    checked = {t for t in _outcomes(shoddy) if t.startswith("test_kernel_provider_matches")}
    ours = {"rms_norm-shoddy/good", "silu_and_mul-shoddy/swapped", "rms_nrom-shoddy/typo"}
    core = {f"{op}-core/reference" for op, spec in OPS.items() if not spec.optional}
    assert checked == {f"test_kernel_provider_matches_reference[{p}-{d}]"
                       for p in ours | core for d in DTYPES}


def test_says_what_is_wrong(shoddy: CliResult) -> None:
    out = shoddy.stdout
    assert "silu_and_mul by shoddy/swapped in float32 (seed 0): 4 of 4 cases do not match" in out
    assert "'rms_nrom' is not a core op" in out
    assert "attention backend 'forgetful' in float32 (seed 0):" in out
    assert re.search(r"greedy tokens of a tiny model on 'shoddy' vs 'cpu' in float32 \(seed 0\): "
                     r"2 of 2 cases do not match the reference", out)
    assert "batch size 1: prompt 0: first differs at token " in out
    assert "plugins that did not load: future (pagoda-fake-future) refused: " in out
