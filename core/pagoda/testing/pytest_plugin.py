"""pytest plugin: certify a Pagoda platform plugin with the core's conformance kit.

It is not registered globally; a platform package opts in. In the conftest.py at the root
of its tests::

    pytest_plugins = ["pagoda.testing.pytest_plugin"]

and in a test module, take the ready-made suite (see `pagoda.testing.suite`)::

    from pagoda.testing.suite import *  # noqa: F401,F403

then run ``pytest --pagoda-platform NAME`` (NAME as `pagoda plugins` lists it; add
``--pagoda-seed N`` for other random inputs). Or, without a conftest:
``pytest -p pagoda.testing.pytest_plugin --pagoda-platform NAME tests/``.

Tests of your own can ask for these fixtures:

- ``pagoda_platform_name``: the NAME given (tests that need it fail to collect, saying
  why, if it is missing, not installed or not usable here);
- ``pagoda_platform``: its `Platform`, built by the plugin's factory;
- ``pagoda_device``: the platform's torch device;
- ``pagoda_seed``: the seed for random inputs;
- ``pagoda_tiny_model``: the directory of a tiny random Llama checkpoint (config.json,
  safetensors, tokenizer) drawn from the seed, made once per session;
- ``pagoda_kernel_provider``: parametrized over every provider of every op that runs on
  the platform (a `ProviderEntry`; core's references included);
- ``pagoda_attention_backend``: parametrized over every attention backend that runs on it
  (a `BackendEntry`);
- ``pagoda_dtype``: parametrized over float32, bfloat16 and float16.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pagoda.platforms.platform import Platform
from pagoda.platforms.selection import DeviceError, choose_device, resolve_platform
from pagoda.plugins.manager import get_registries
from pagoda.testing.providers import attention_backends, kernel_providers
from pagoda.testing.tiny_model import write_tiny_llama
from pagoda.testing.tolerances import DTYPES, dtype_name


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("pagoda", "Pagoda platform conformance")
    group.addoption("--pagoda-platform", metavar="NAME", default=None,
                    help="the Pagoda platform (device name) to certify, e.g. cpu")
    group.addoption("--pagoda-seed", metavar="N", type=int, default=0,
                    help="seed of the random conformance inputs (default 0)")


def platform_name(config: pytest.Config) -> str:
    """The --pagoda-platform value, checked to be installed and usable here (else the
    tests that need it fail to collect, with the reason and no traceback)."""
    name = config.getoption("pagoda_platform", default=None)
    if not name:
        pytest.fail("the Pagoda conformance tests need --pagoda-platform NAME "
                    "(see `pagoda plugins`)", pytrace=False)
    try:
        return choose_device(name, get_registries())
    except DeviceError as exc:
        pytest.fail(f"--pagoda-platform {name}: {exc}", pytrace=False)


def pytest_report_header(config: pytest.Config) -> str | None:
    name = config.getoption("pagoda_platform", default=None)
    if not name:
        return None
    return f"pagoda platform: {name} (seed {config.getoption('pagoda_seed')})"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    names = metafunc.fixturenames
    if "pagoda_kernel_provider" in names:
        entries = kernel_providers(platform_name(metafunc.config))
        metafunc.parametrize("pagoda_kernel_provider", entries, ids=[e.id for e in entries])
    if "pagoda_attention_backend" in names:
        backends = attention_backends(platform_name(metafunc.config))
        metafunc.parametrize("pagoda_attention_backend", backends, ids=[b.id for b in backends])
    if "pagoda_dtype" in names:
        metafunc.parametrize("pagoda_dtype", DTYPES, ids=[dtype_name(d) for d in DTYPES])


@pytest.fixture(scope="session")
def pagoda_platform_name(pytestconfig: pytest.Config) -> str:
    return platform_name(pytestconfig)


@pytest.fixture(scope="session")
def pagoda_platform(pagoda_platform_name: str) -> Platform:
    return resolve_platform(pagoda_platform_name)


@pytest.fixture(scope="session")
def pagoda_device(pagoda_platform: Platform) -> torch.device:
    return pagoda_platform.torch_device(0)


@pytest.fixture(scope="session")
def pagoda_seed(pytestconfig: pytest.Config) -> int:
    return int(pytestconfig.getoption("pagoda_seed", default=0))


@pytest.fixture(scope="session")
def pagoda_tiny_model(tmp_path_factory: pytest.TempPathFactory, pagoda_seed: int) -> Path:
    return write_tiny_llama(tmp_path_factory.mktemp("pagoda_tiny_model"), seed=pagoda_seed)
