"""Placeholder; the installer writes the real version."""

__version__ = "0.0.0+vsnapref.dev"
FLAVOUR = "dev"
