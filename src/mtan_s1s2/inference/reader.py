"""A background reader: the next tiles of a scene are read while the current one is classified.

Reading a tile (windowed rasterio / xarray reads, decompression, the radiometry, the
quality band and the normalisation) and classifying it use different resources: file I/O
and GDAL / netCDF decoding, which release the GIL, against torch's compute threads. With
:class:`BackgroundReader` a single thread prepares the tiles in order into a bounded
queue (``depth`` tiles ahead, so memory stays a few tiles), and the consumer iterates over
``(window, item)`` pairs as they come.

Errors: an exception raised while preparing a tile is handed to the consumer, which
re-raises it (with its traceback) at that tile; the consumer stopping early (an error in
the model, an interrupt) stops the thread at its next tile. Nothing hangs: the reader
never blocks for longer than :data:`POLL_S` without checking whether it should stop.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Generic, TypeVar

from rasterio.windows import Window

T = TypeVar("T")

POLL_S = 0.1
"""Seconds the reader waits on a full queue before checking whether the consumer stopped."""


class _End:
    """The marker that the reader has read every window."""


class _Failure:
    """An exception of the reader, handed to the consumer."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


class BackgroundReader(Generic[T]):
    """Prepare ``read(window)`` for every window in a thread, ``depth`` windows ahead.

    Iterate once (``for window, item in reader``) or use it as a context manager, which
    stops the thread on exit. ``depth=0`` reads inline, in the consumer's thread (the same
    items in the same order, no thread).

    Args:
        windows: The windows, in the order they are consumed.
        read: Prepares one window (runs in the reader thread).
        depth: Windows prepared ahead of the consumer (the queue's size, >= 0).
        name: Thread name (for debuggers and logs).

    Raises:
        ValueError: On a negative ``depth``.
    """

    def __init__(
        self, windows: Sequence[Window], read: Callable[[Window], T], depth: int = 2, name: str = "tile-reader"
    ) -> None:
        if int(depth) < 0:
            raise ValueError(f"prefetch must be >= 0 tiles (0 = read inline), got {depth}.")
        self.windows = list(windows)
        self.read = read
        self.depth = int(depth)
        self.name = name
        self._stop = threading.Event()
        self._queue: queue.Queue[tuple[Window, T] | _End | _Failure] = queue.Queue(maxsize=max(self.depth, 1))
        self._thread: threading.Thread | None = None

    def _put(self, item: tuple[Window, T] | _End | _Failure) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        try:
            for w in self.windows:
                if self._stop.is_set() or not self._put((w, self.read(w))):
                    return
        except BaseException as err:  # handed to the consumer, which re-raises it
            self._put(_Failure(err))
            return
        self._put(_End())

    def __iter__(self) -> Iterator[tuple[Window, T]]:
        """``(window, read(window))`` in the order of ``windows``; re-raises the reader's errors."""
        if self.depth == 0:
            for w in self.windows:
                yield w, self.read(w)
            return
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()
        try:
            while not isinstance(item := self._queue.get(), _End):
                if isinstance(item, _Failure):
                    raise item.error
                yield item
        finally:
            self.close()

    def close(self) -> None:
        """Stop the thread (it finishes the tile it is reading) and wait for it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> BackgroundReader[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["POLL_S", "BackgroundReader"]
