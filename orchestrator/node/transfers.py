"""What this node measured of its own disk and origin reads, until the next heartbeat carries it.

The pool learns each node's disk and origin bandwidth from these (pool/bandwidth.py), its configured figures
as the prior. A peer copy's rate is not kept here: it goes to the control plane with the copy's ticket report
(peer_fetch.py), bound to a transfer the control plane authorised.
"""

from __future__ import annotations

import threading

from sdk.wire.peers import SampleTier, TransferSample, plausible_transfer

from .weights_fill import FillReport

# A heartbeat carries at most this many (NodeHeartbeat.transfers' bound); older ones are dropped first.
MAX_PENDING = 64


class TransferLog:
    """Samples waiting for a heartbeat; thread-safe (fills run in threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: list[TransferSample] = []

    def record(self, report: FillReport) -> None:
        """An origin fill's bytes and seconds (a datacenter fill's went with its ticket report)."""
        if report.tier == "origin":
            self._add("origin", report.bytes_fetched, report.seconds)

    def record_disk(self, size: int, seconds: float) -> None:
        """A measured read of cached weights from this node's disk."""
        self._add("disk", size, seconds)

    def drain(self) -> list[TransferSample]:
        """The samples for this heartbeat; `restore` them if it did not get through."""
        with self._lock:
            out, self._pending = self._pending, []
            return out

    def restore(self, samples: list[TransferSample]) -> None:
        with self._lock:
            self._pending = (samples + self._pending)[-MAX_PENDING:]

    def _add(self, tier: SampleTier, size: int, seconds: float) -> None:
        if not plausible_transfer(size, seconds):
            return
        with self._lock:
            self._pending.append(TransferSample(tier=tier, bytes=size, seconds=round(seconds, 6)))
            del self._pending[:-MAX_PENDING]
