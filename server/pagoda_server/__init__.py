"""pagoda-server: Pagoda's HTTP front end."""

__version__ = "0.1.0"
