"""Progress of a long step, the one helper every command uses.

On a terminal it is a tqdm bar on stderr. Without one (``--out`` runs under nohup, CI,
a pipe) a bar would be invisible or garbage, and printing nothing for minutes looks
like a hang, so it writes one plain line to stderr at most every ``every_s`` seconds
(and one at the end). ``enabled=False`` (``--quiet``) silences both.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

EVERY_S = 10.0  # seconds between plain lines: often enough to show life, rare enough for a log


class Progress:
    """``update(k)`` / ``goto(n)`` / ``close()``; also a context manager."""

    def __init__(self, total: int | None, desc: str, unit: str = "it", *, initial: int = 0,
                 enabled: bool | None = None, every_s: float = EVERY_S, stream: TextIO | None = None,
                 clock: Any = time.monotonic) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.total, self.desc, self.unit, self.n = total, desc, unit, initial
        self.every_s, self.clock = every_s, clock
        self.on = enabled is not False
        tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._bar = None
        if self.on and tty:
            from tqdm import tqdm

            self._bar = tqdm(total=total, initial=initial, unit=unit, desc=desc, file=self.stream, leave=False)
        self._t0 = self._last = clock()
        self._closed = False

    def goto(self, n: int) -> None:
        """Set the count to ``n`` (absolute)."""
        self.update(n - self.n)

    def update(self, k: int = 1) -> None:
        self.n += k
        if self._bar is not None:
            self._bar.update(k)
        elif self.on and self.clock() - self._last >= self.every_s:
            self._line()

    def _line(self, final: bool = False) -> None:
        self._last = now = self.clock()
        of = f"/{self.total}" if self.total is not None else ""
        tail = "done" if final else "running"
        print(f"{self.desc}: {self.n}{of} {self.unit} ({now - self._t0:.0f} s, {tail})",
              file=self.stream, flush=True)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._bar is not None:
            self._bar.close()
        elif self.on and self.clock() - self._t0 >= self.every_s:
            self._line(final=True)  # a step short enough to print no line stays silent

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextmanager
def heartbeat(desc: str, *, enabled: bool | None = None, every_s: float = EVERY_S,
              stream: TextIO | None = None, status: Callable[[], str] | None = None) -> Iterator[None]:
    """For a step with no count to report (a profile, a calibration): a background thread shows
    the elapsed time (a tqdm bar on a terminal, else a line every ``every_s`` seconds; ``status``:
    what the line says besides the time, read at each line, default "still running")."""
    if enabled is False:
        yield
        return
    stream = stream if stream is not None else sys.stderr
    tty = bool(getattr(stream, "isatty", lambda: False)())
    stop = threading.Event()
    t0 = time.monotonic()
    bar = None
    if tty:
        from tqdm import tqdm

        bar = tqdm(total=None, desc=desc, unit="s", file=stream, leave=False, bar_format="{desc}: {elapsed}")

    def beat() -> None:
        while not stop.wait(1.0 if bar is not None else every_s):
            if bar is not None:
                bar.refresh()
            else:
                what = status() if status is not None else "still running"
                print(f"{desc}: {what} ({time.monotonic() - t0:.0f} s)", file=stream, flush=True)

    th = threading.Thread(target=beat, daemon=True)
    th.start()
    try:
        yield
    finally:
        stop.set()
        th.join()
        if bar is not None:
            bar.close()
