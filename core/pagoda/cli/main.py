"""`pagoda` entry point: subcommands come from the plugin registry (core's included)."""

from __future__ import annotations

import argparse
import logging
import sys

from pagoda import logs
from pagoda.plugins.first_party import FIRST_PARTY_COMMANDS, missing_command_message
from pagoda.plugins.lazy import load_target
from pagoda.plugins.manager import PluginRegistries, get_registries, warn_about_failed_plugins
from pagoda.version import __version__

logger = logging.getLogger("pagoda.cli")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The CLI's parser; with `command` (the first word of the command line) only the
    subcommand it names, if any, gets its arguments (loading each command's module and
    options takes time a run of one command does not need: `pagoda serve` starts its
    engine core sooner), the others their name and help; None: every one of them."""
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
        if command is not None and command not in (spec.name, *spec.aliases):
            sub.add_parser(spec.name, help=spec.help, description=spec.help,
                           aliases=list(spec.aliases))
            continue
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


def _missing_command(argv: list[str], regs: PluginRegistries) -> str | None:
    """The first-party command `argv` names ("serve", "bench serve") if no plugin added it."""
    registered = {entry.spec.name for entry in regs.cli_commands}
    for command in (" ".join(argv[:2]), " ".join(argv[:1])):
        if command in FIRST_PARTY_COMMANDS and command not in registered:
            return command
    return None


def main(argv: list[str] | None = None) -> int:
    logs.configure(logging.INFO)
    regs = get_registries()
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv[0] if argv else "")
    missing = _missing_command(argv, regs)
    if missing:  # rather than argparse's "invalid choice"
        parser.exit(2, f"pagoda: error: {missing_command_message(missing, regs)}\n")
    args = parser.parse_args(argv)
    if args.command != "plugins":  # `pagoda plugins` shows the failures itself
        warn_about_failed_plugins(regs)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    return int(load_target(args._run)(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
