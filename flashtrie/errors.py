"""Exceptions raised by flashtrie."""

from __future__ import annotations


class FlashTrieError(Exception):
    """Base class of every error flashtrie raises on purpose."""


class InputError(FlashTrieError, ValueError):
    """An argument is malformed or out of range; the message names it, its value and the limit."""


class IndexFormatError(FlashTrieError):
    """An index file is corrupt, truncated, foreign or of an unsupported format version."""


class DeviceError(FlashTrieError, RuntimeError):
    """The GPU backend cannot run the request (no device, not enough memory, ...)."""


class WorkerError(FlashTrieError, RuntimeError):
    """A CPU backend's worker process died during a search, or the searcher is closed."""


class MissingDependency(FlashTrieError, ImportError):
    """An optional dependency of the called part is not installed; the message names the extra that brings it."""
