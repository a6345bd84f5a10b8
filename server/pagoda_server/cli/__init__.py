"""The `pagoda` subcommands this package adds: serve, chat, complete, run-batch, bench serve."""
