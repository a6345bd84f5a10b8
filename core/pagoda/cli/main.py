"""`pagoda` entry point: subcommands come from the plugin registry (core's included)."""

from __future__ import annotations

import argparse
import logging
import sys

from pagoda import logs
from pagoda.plugins.lazy import load_target
from pagoda.plugins.manager import get_registries, warn_about_failed_plugins
from pagoda.version import __version__

logger = logging.getLogger("pagoda.cli")


def build_parser() -> argparse.ArgumentParser:
    regs = get_registries()
    parser = argparse.ArgumentParser(
        prog="pagoda", description="Pagoda: LLM inference and serving on any accelerator."
    )
    parser.add_argument("--version", action="version", version=f"pagoda {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for entry in sorted(regs.cli_commands, key=lambda e: e.spec.name):
        spec = entry.spec
        if spec.name in sub.choices or " " in spec.name:
            continue  # taken by a higher priority, or a sub-subcommand ("bench serve")
        try:
            add_arguments = load_target(spec.add_arguments)
        except Exception:
            logger.exception("CLI command %r of plugin %r cannot be loaded; skipped",
                             spec.name, entry.plugin)
            continue
        cmd = sub.add_parser(spec.name, help=spec.help, description=spec.help,
                             aliases=list(spec.aliases))
        add_arguments(cmd)
        cmd.set_defaults(_run=spec.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    logs.configure(logging.INFO)
    regs = get_registries()
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command != "plugins":  # `pagoda plugins` shows the failures itself
        warn_about_failed_plugins(regs)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    return int(load_target(args._run)(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
