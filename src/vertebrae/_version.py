"""The package version, in a module of its own so low-level modules can record it without importing the package."""

__version__ = "0.1.0"
