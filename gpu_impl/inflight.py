"""Searches left running on the device (``search(..., device_out=True)`` returns without a synchronisation):
what they still need from the host side until the device is done with them."""

from __future__ import annotations

from collections import deque
from typing import Any

__all__ = ["Inflight"]

#: Calls kept track of at most; beyond, the oldest is waited for.
MAX_CALLS = 64


class Inflight:
    """The caller's device arrays each running search reads (kept alive until its end event), and the event
    after which the last call's upload has left the pinned upload buffer (the next call writes there)."""

    def __init__(self) -> None:
        self._calls: deque[tuple[Any, list[Any]]] = deque()
        self._upload_done: Any = None

    def add(self, upload_done: Any, done: Any, keep: list[Any]) -> None:
        """A call left running: ``upload_done`` is recorded after its upload, ``done`` after its last copy."""
        self._upload_done = upload_done
        self._calls.append((done, keep))
        while self._calls and (len(self._calls) > MAX_CALLS or self._calls[0][0].is_done):
            event, _ = self._calls.popleft()
            event.sync()

    def before_staging(self) -> None:
        """Wait until the last call left running has uploaded what it staged (a no-op otherwise)."""
        if self._upload_done is not None:
            self._upload_done.sync()
            self._upload_done = None
