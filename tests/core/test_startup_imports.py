"""Plugin discovery and the CLI parser stay light: no torch until an engine is built."""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import sys
from pagoda.cli.main import build_parser
build_parser()
heavy = [m for m in ("torch", "transformers", "triton") if m in sys.modules]
print(",".join(heavy))
"""


def test_cli_parser_and_discovery_import_no_torch():
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "", f"imported at start-up: {out.stdout.strip()}"
