"""pagoda-plugin-template: a platform plugin to copy (runs on the host CPU)."""

__version__ = "0.1.0"
