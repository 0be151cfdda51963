"""What one simulated run records: every call, replica, session and preemption, in virtual seconds.

The report (report.py) derives every figure from these records, so a figure can always be traced
back to the calls and replicas behind it.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class CallRecord:
    session_id: str
    model: str
    prompt_tokens: int
    output_tokens: int
    issued_s: float  # the agent asked for the call
    granted_s: float | None = None  # it got a lease (after waiting for a GPU, if it had to)
    served_s: float | None = None  # its replica began on it (after the replica's load, if it had to wait for one)
    first_token_s: float | None = None
    done_s: float | None = None
    tier: str = ""  # where its replica's weights came from, or warm/loading
    waited_for_gpu: bool = False  # it was told to wait at least once
    waited_for_load: bool = False  # its replica was still loading when it got the lease
    cold_start: bool = False  # the replica that served it became ready after the call was issued
    interruptions: int = 0
    quiet_continues: int = 0  # times its generation went quiet on a live node and was continued there
    service_class: str = "interactive"  # its task's class: which latency objectives it is judged by

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_s is None else self.first_token_s - self.issued_s

    @property
    def tpot_s(self) -> float | None:
        """Seconds per output token after the first (0 for a one-token answer)."""
        if self.first_token_s is None or self.done_s is None:
            return None
        return (self.done_s - self.first_token_s) / max(self.output_tokens - 1, 1)

    @property
    def gpu_wait_s(self) -> float:
        """Seconds without a GPU to run on: queued for a lease, then waiting for its replica to load. A policy
        that starts a replica for a step and one that queues the step until a scaler's replica is ready
        both keep it waiting; only counting both compares them."""
        start = self.served_s if self.served_s is not None else self.granted_s
        return 0.0 if start is None else start - self.issued_s


@dataclass
class ReplicaRecord:
    replica_id: str
    model: str
    node_id: str
    gpus: int
    usd_per_hour: float  # its share of the node's price
    tier: str  # where the weights came from: disk, datacenter, origin; "preloaded" for always-warm
    started_s: float
    ready_s: float | None = None
    ended_s: float | None = None
    busy_s: float = 0.0  # time with at least one call being served
    preloaded: bool = False
    prewarm: bool = False  # started by the scaler for steps that had not asked yet
    first_lease_s: float | None = None
    devices: tuple[int, ...] = ()  # its GPU indexes on the node (several replicas may share one)

    @property
    def load_s(self) -> float | None:
        return None if self.ready_s is None else self.ready_s - self.started_s

    def held_s(self, end_s: float) -> float:
        return (self.ended_s if self.ended_s is not None else end_s) - self.started_s


@dataclass
class SessionRecord:
    session_id: str
    arrival_s: float
    ended_s: float | None = None
    parent: str | None = None
    failed: str | None = None  # why the fleet could never serve it


@dataclass
class PreemptionRecord:
    node_id: str
    at_s: float
    notice_s: float
    calls_cut: int
    tokens_lost: int  # Berth's recovery: generated tokens not continued elsewhere
    tokens_lost_restart: int  # a restart from scratch: every token of the cut tasks so far


@dataclass
class StallRecord:
    """A node whose engines went quiet for a while, and what the suspect-node rules made of its generations."""

    node_id: str
    at_s: float
    seconds: float
    calls_quiet: int = 0  # generating when it began
    continued: int = 0  # quiet generations continued on their lease
    calls_moved: int = 0  # given up as stalled and placed again


@dataclass
class SimResult:
    policy: str
    seed: int
    horizon_s: float  # the workload's duration
    end_s: float  # when the last session ended
    calls: list[CallRecord] = field(default_factory=list)
    replicas: list[ReplicaRecord] = field(default_factory=list)
    sessions: list[SessionRecord] = field(default_factory=list)
    preemptions: list[PreemptionRecord] = field(default_factory=list)
    stalls: list[StallRecord] = field(default_factory=list)
    # (virtual second, model → replicas loading or warm) at every scaler tick
    replica_samples: list[tuple[float, dict[str, int]]] = field(default_factory=list)
    decision_seconds: float = 0.0  # wall time spent in placement and scaling decisions
    floor_gpu_hours: float = 0.0  # the workload's work at the fleet's best throughput (floor.py): no policy needs less
