"""Engine options for every command that builds an engine (serve, run-batch, bench): the
leaf fields of EngineConfig, the model as the positional argument (or `--model`)."""

from __future__ import annotations

import argparse

from pagoda.cli.dataclass_args import add_dataclass_arguments, dataclass_from_args
from pagoda.config import EngineConfig


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    add_dataclass_arguments(parser, EngineConfig, positional=("model",))
    parser.add_argument("--model", dest="model_option", metavar="MODEL",
                        help="The model, as an option instead of the positional argument.")


def engine_config(args: argparse.Namespace) -> EngineConfig:
    """The EngineConfig of parsed engine options. Bad options and an unusable device end the
    command with their message, before anything loads."""
    from pagoda.platforms.selection import DeviceError

    if args.model_option is not None:
        if args.model is not None:
            raise SystemExit(f"pagoda {args.command}: error: the model is given twice (as "
                             "an argument and as --model)")
        args.model = args.model_option
    try:
        return dataclass_from_args(EngineConfig, args)
    except (ValueError, DeviceError) as exc:
        raise SystemExit(f"pagoda {args.command}: error: {exc}") from None
