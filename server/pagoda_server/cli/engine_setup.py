"""An EngineConfig from the engine options every engine-running command shares."""

from __future__ import annotations

import argparse

from pagoda.cli.engine_args import engine_kwargs
from pagoda.config import EngineConfig


def engine_config(args: argparse.Namespace, served_model_name: str | None = None) -> EngineConfig:
    """The EngineConfig for parsed `add_engine_arguments` options."""
    return EngineConfig.from_options(**engine_kwargs(args), served_model_name=served_model_name)
