"""Progress on stderr: tqdm's bars where tqdm is installed (the ``lab`` extra), else a plain fallback that
prints the count now and then, so the library's commands show progress without it."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["Progress", "progress", "say"]

#: seconds between two lines of the plain fallback
_EVERY_S = 2.0


class Progress:
    """The plain fallback: ``desc: n/total unit`` on stderr at most every few seconds and once at the end."""

    def __init__(self, iterable: Iterable[Any] | None = None, *, total: int | None = None, desc: str = "",
                 unit: str = "it", disable: bool = False, **_: Any) -> None:
        self.iterable, self.desc, self.unit, self.disable = iterable, desc, unit, disable
        self.total = total if total is not None else (len(iterable) if hasattr(iterable, "__len__") else None)  # type: ignore[arg-type]
        self.n, self.postfix, self._last = 0, "", time.monotonic()

    def __iter__(self) -> Iterator[Any]:
        assert self.iterable is not None, "Progress: iterate over a bar made from an iterable"
        for item in self.iterable:
            yield item
            self.update()
        self.close()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def update(self, n: int = 1) -> None:
        self.n += n
        if time.monotonic() - self._last >= _EVERY_S:
            self._line()

    def set_postfix_str(self, text: str) -> None:
        self.postfix = text

    def close(self) -> None:
        if self.n:
            self._line()
        self.n = 0

    def _line(self) -> None:
        self._last = time.monotonic()
        if not self.disable:
            of = f"/{self.total:,}" if self.total is not None else ""
            extra = f" ({self.postfix})" if self.postfix else ""
            print(f"{self.desc}: {self.n:,}{of}{self.unit}{extra}", file=sys.stderr, flush=True)


def progress(iterable: Iterable[Any] | None = None, **kw: Any) -> Any:
    """A progress bar on stderr over ``iterable`` (or one updated by hand, ``total=``): tqdm's signature
    (``desc``, ``unit``, ``total``, ``disable``, ``leave``, ``unit_scale``)."""
    kw.setdefault("file", sys.stderr)
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return Progress(iterable, **kw)
    return tqdm(iterable, **kw)


def say(text: str) -> None:
    """A line on stderr that does not tear a running bar."""
    try:
        from tqdm.auto import tqdm
    except ImportError:
        print(text, file=sys.stderr, flush=True)
        return
    tqdm.write(text, file=sys.stderr)
