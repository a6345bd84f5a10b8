"""Entry point of pagoda-server: registers its CLI subcommands into `pagoda`."""

from __future__ import annotations

from pagoda.plugins import CliCommandSpec, PluginInfo, hookimpl
from pagoda_server import __version__

TARGET_PLUGIN_API = 3
_CLI = "pagoda_server.cli"


@hookimpl
def pagoda_plugin_info() -> PluginInfo:
    return PluginInfo("server", __version__, TARGET_PLUGIN_API, "HTTP front end",
                      package="pagoda-server", verified_on="any host (not hardware-specific)")


@hookimpl
def pagoda_cli_subcommands() -> list[CliCommandSpec]:
    def command(name: str, module: str, help: str) -> CliCommandSpec:
        return CliCommandSpec(name, help, f"{_CLI}.{module}:add_arguments", f"{_CLI}.{module}:run")

    return [
        command("serve", "serve", "run the OpenAI- and Anthropic-compatible HTTP server"),
        command("chat", "chat", "chat with a running server (interactive, streaming)"),
        command("complete", "complete", "complete a prompt on a running server (streaming)"),
        command("run-batch", "run_batch",
                "run an OpenAI batch file (JSONL) offline, without a server"),
        command("bench serve", "bench_serve",
                "benchmark a running server: random prompts, Poisson arrivals"),
    ]
