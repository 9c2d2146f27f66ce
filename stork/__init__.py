"""Stork: a batch scheduler for data placement."""

__version__ = "0.1.0"
