"""The `pagoda` command line."""
