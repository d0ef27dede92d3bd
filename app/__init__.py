"""Clarion's composition root: settings, catalog, HTTP API, delivery worker, CLI."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("clarion")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"
