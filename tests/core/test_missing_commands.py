"""`pagoda serve` (and the other commands pagoda-server adds) without pagoda-server: a
message that names the package to install, or the allow-list that disabled it, rather than
argparse's "invalid choice"."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from cli_harness import clean_env, run_pagoda

from pagoda.plugins.first_party import FIRST_PARTY_COMMANDS

SERVER_COMMANDS = [["serve"], ["chat"], ["complete", "hi"], ["run-batch", "-i", "x", "-o", "y"],
                   ["bench", "serve"]]


def _command(argv: list[str]) -> str:
    return " ".join(argv[:2]) if argv[0] == "bench" else argv[0]


def test_the_table_names_every_command_pagoda_server_adds() -> None:
    from pagoda_server.plugin import pagoda_cli_subcommands

    names = {spec.name for spec in pagoda_cli_subcommands()}
    assert names == {_command(argv) for argv in SERVER_COMMANDS}
    assert {c: FIRST_PARTY_COMMANDS[c] for c in names} == dict.fromkeys(names, "pagoda-server")


@pytest.fixture(scope="module")
def site_without_server(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy (by links) of this venv's site-packages without pagoda-server: its dist-info,
    its editable .pth and finder are left out, so neither Python nor discovery finds it."""
    mirror = tmp_path_factory.mktemp("site-without-server")
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if "pagoda_server" not in entry.name:
            (mirror / entry.name).symlink_to(entry)
    return mirror


def _python_with_site(site_dir: Path, code: str, *args: str) -> subprocess.CompletedProcess:
    """`python -S` (no site-packages of its own) with `site_dir` as its only one."""
    program = f"import site, sys; site.addsitedir({str(site_dir)!r}); {code}"
    return subprocess.run([sys.executable, "-S", "-c", program, *args], capture_output=True,
                          text=True, timeout=120, env=clean_env(), cwd=site_dir)


def test_the_mirror_has_core_but_not_the_server(site_without_server: Path) -> None:
    probe = _python_with_site(site_without_server,
                              "import pagoda.cli.main, pagoda_cpu; import pagoda_server")
    assert "No module named 'pagoda_server'" in probe.stderr, probe.stderr


@pytest.mark.parametrize("argv", SERVER_COMMANDS, ids=_command)
def test_command_without_pagoda_server_says_what_to_install(site_without_server: Path,
                                                            argv: list[str]) -> None:
    result = _python_with_site(site_without_server,
                               "from pagoda.cli.main import main; sys.exit(main())", *argv)
    assert result.returncode == 2
    assert f"{_command(argv)} comes with pagoda-server: pip install pagoda-server" in result.stderr
    assert "invalid choice" not in result.stderr


def test_core_commands_still_run_without_pagoda_server(site_without_server: Path) -> None:
    result = _python_with_site(site_without_server,
                               "from pagoda.cli.main import main; sys.exit(main())",
                               "bench", "throughput", "--help")
    assert result.returncode == 0, result.stderr
    assert "--max-num-seqs" in result.stdout


def test_disabled_server_plugin_names_the_allow_list() -> None:
    result = run_pagoda("serve", PAGODA_PLUGINS="cpu")
    assert result.returncode == 2
    assert ("serve comes with pagoda-server, whose plugin 'server' is disabled by "
            "PAGODA_PLUGINS=cpu; add server to PAGODA_PLUGINS or unset it") in result.stderr
    assert "pip install" not in result.stderr
