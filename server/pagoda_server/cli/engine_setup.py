"""An EngineConfig from the engine options every engine-running command shares."""

from __future__ import annotations

import argparse

from pagoda.cli.engine_args import engine_kwargs
from pagoda.config import EngineConfig
from pagoda.platforms.selection import DeviceError, choose_device
from pagoda.plugins import get_registries


def engine_config(args: argparse.Namespace, served_model_name: str | None = None) -> EngineConfig:
    """The EngineConfig for parsed `add_engine_arguments` options. Bad options and an
    unusable device end the command with their message, before anything loads."""
    try:
        config = EngineConfig.from_options(**engine_kwargs(args),
                                           served_model_name=served_model_name)
        choose_device(config.device, get_registries())
    except (ValueError, DeviceError) as exc:
        raise SystemExit(f"pagoda {args.command}: error: {exc}") from None
    return config
