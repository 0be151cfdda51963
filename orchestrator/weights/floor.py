"""The transfer floor: a source that sends slower than a floor, measured over a sliding window, is abandoned.

A read timeout alone cannot catch a source that trickles: 1 KiB every 50 s never waits the 60 s a read allows,
and stretched a load past its 30-minute timeout (issue 34). The fill keeps the bytes that arrived, from all its
files' streams together, over the last `window_s` seconds; once it has run a whole window, fewer than
`bytes_per_s × window_s` in the last one is a stall (`TransferStalled`), carrying the rate it measured, which
the fill's caller reports against the source and goes on from the next one.

Pure: the clock is passed in, so the rule is tested without waiting.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass

from .fetchers._protocol import WeightsFetchError

MIB = 2**20
# 1 MiB/s over 30 s. The slowest source the pool plans with is an origin at ~0.5 GiB/s (weights_transfer.py),
# 500× the floor, so an honest source on a congested link stays far above it; and a stalling one costs at most
# 30 s (plus one read, `fetchers.http.READ_S`) before the load goes on elsewhere, against the 30-minute load timeout.
DEFAULT_FLOOR_BYTES_PER_S = 1.0 * MIB
DEFAULT_FLOOR_WINDOW_S = 30.0


@dataclass(frozen=True)
class TransferFloor:
    """The slowest a transfer may go (`bytes_per_s`), judged over the last `window_s` seconds."""

    bytes_per_s: float = DEFAULT_FLOOR_BYTES_PER_S
    window_s: float = DEFAULT_FLOOR_WINDOW_S


class TransferStalled(WeightsFetchError):
    """A source sent fewer bytes than the floor over a whole window: abandoned, and the measured rate is the
    evidence (`bytes_in_window` bytes in the last `window_s` seconds)."""

    def __init__(self, message: str, *, bytes_in_window: int, window_s: float, floor: TransferFloor) -> None:
        super().__init__(message)
        self.bytes_in_window = bytes_in_window
        self.window_s = window_s
        self.floor = floor

    @property
    def bytes_per_s(self) -> float:
        return self.bytes_in_window / self.window_s


class RateWatch:
    """The bytes a fill received over its last window, from all its threads; `check` raises `TransferStalled`
    below the floor."""

    def __init__(self, floor: TransferFloor, now: float) -> None:
        self.floor = floor
        self.began = now
        self._arrivals: deque[tuple[float, int]] = deque()
        self._in_window = 0
        self._lock = threading.Lock()

    def add(self, n: int, now: float) -> None:
        with self._lock:
            self._arrivals.append((now, n))
            self._in_window += n
            self._forget(now)

    def restart(self, now: float) -> None:
        """Judge only from `now` on (a whole window later): time spent on local work is not the source's."""
        with self._lock:
            self.began = max(self.began, now)

    def check(self, now: float, named: str) -> None:
        """Raise `TransferStalled` if a whole window has run and it held fewer bytes than the floor asks."""
        with self._lock:
            self._forget(now)
            window = self.floor.window_s
            if now - self.began < window or self._in_window >= self.floor.bytes_per_s * window:
                return
            got = self._in_window
        raise TransferStalled(
            f"{named}: stalled: {got} bytes in the last {window:g} s"
            f" ({got / window:.0f} B/s), below the floor of {self.floor.bytes_per_s:.0f} B/s",
            bytes_in_window=got,
            window_s=window,
            floor=self.floor,
        )

    def _forget(self, now: float) -> None:
        while self._arrivals and self._arrivals[0][0] <= now - self.floor.window_s:
            self._in_window -= self._arrivals.popleft()[1]
