"""Berth's settings: one object, from defaults, then `BERTH_*` environment variables, then flags.

Every process (server, worker, engine, `berth up`) reads the same object so that a port
changed in one place is seen by all of them.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr

from sdk import SecretSettingRefused
from sdk.secret_settings import FILE_SUFFIX, secret_setting

ENV_PREFIX = "BERTH_"
# The settings that are secrets. Each may instead be read from a file that BERTH_<NAME>_FILE names (a Secret mounted
# as files, as the Helm chart does): sdk/secret_settings.py reads them, and refuses both forms at once.
SECRET_SETTINGS = ("admin_key", "database_url", "join_token", "temporal_api_key")
# The pool's placement policies by name (orchestrator/pool/placement_policy.py builds each).
PlacementPolicyName = Literal["berth", "k8s-spread"]


__all__ = [
    "ENV_PREFIX",
    "FILE_SUFFIX",
    "SECRET_SETTINGS",
    "BerthConfig",
    "PlacementPolicyName",
    "SecretSettingRefused",
    "TemporalSettingsRefused",
]


class TemporalSettingsRefused(ValueError):
    """A BERTH_TEMPORAL_* setting that cannot be used (orchestrator/temporal.py reads them); the message names the
    variable. Here, not there, so that the CLI can report it without importing Temporal's SDK for every command."""


class BerthConfig(BaseModel):
    data_dir: Path = Field(default=Path(".berth"), description="SQLite files, Temporal's database, logs")
    host: str = "127.0.0.1"
    api_port: int = Field(default=8080, ge=0, le=65535)
    temporal_port: int = Field(default=7233, ge=0, le=65535)
    temporal_ui_port: int = Field(default=8233, ge=0, le=65535)
    temporal_metrics_port: int = Field(
        default=0, ge=0, le=65535, description="the embedded Temporal's Prometheus /metrics; 0: a free port"
    )
    engine_port: int = Field(default=8090, ge=0, le=65535)
    temporal_address: str | None = Field(default=None, description="host:port of an existing Temporal frontend")
    temporal_namespace: str = "default"
    # How Berth proves itself to a Temporal frontend that asks (mTLS, or an API key as Temporal Cloud takes):
    # a frontend that anyone reaching it may use lets them signal, terminate or read any task, past Berth's keys.
    # orchestrator/temporal.py reads the files and refuses, naming the variable, a setting it cannot use.
    temporal_tls: bool | None = Field(
        default=None,
        description="connect to Temporal over TLS; unset: TLS whenever a TLS file, a server name or an API key is given",
    )
    temporal_tls_cert: Path | None = Field(
        default=None, description="PEM client certificate for mutual TLS with Temporal (with temporal_tls_key)"
    )
    temporal_tls_key: Path | None = Field(
        default=None, description="PEM private key of temporal_tls_cert, unencrypted (with temporal_tls_cert)"
    )
    temporal_tls_ca: Path | None = Field(
        default=None,
        description="PEM CA certificates Temporal's server certificate is checked against (else the system's)",
    )
    temporal_tls_server_name: str | None = Field(
        default=None,
        max_length=253,
        description="the name Temporal's server certificate is checked against, and the TLS server name sent,"
        " when it is not the host of temporal_address",
    )
    temporal_api_key: SecretStr | None = Field(
        default=None, description="an API key sent to Temporal with every call (Temporal Cloud's, for one)"
    )
    temporal_ui_url: str | None = Field(
        default=None,
        max_length=500,
        pattern=r"^https?://\S+$",
        description="where operators open the Temporal UI, for the task page's link to"
        " its workflow; the embedded one's when Berth runs its own Temporal",
    )
    database_url: str | None = Field(default=None, description="SQLAlchemy URL; SQLite under data_dir by default")
    engine_url: str | None = Field(default=None, description="base URL of the simulated engine (…/v1)")
    api_url: str | None = Field(default=None, description="where clients and tool workers reach the API")
    budget_grace_s: float = Field(default=3600.0, gt=0, description="how long a task waits in awaiting_budget")
    join_token: str | None = Field(default=None, description="the secret a GPU node presents to join the fleet")
    # A leaked cluster token must not fill the approval list for good: its nodes wait in a bounded list, and a
    # place frees when an operator approves or removes one, or when one waits past pending_node_ttl_s.
    pending_nodes_max: int = Field(
        default=64,
        ge=1,
        le=10_000,
        description="nodes that joined with the cluster join token and may wait for approval at once; past it a"
        " join is refused (429, naming when the next place frees) and a per-node token still admits at once",
    )
    pending_node_ttl_s: float = Field(
        default=3600.0,
        ge=60,
        le=7 * 86_400,
        description="a node waiting for approval longer than this (from its first join) is dropped, freeing its"
        " place; its agent joins again at the back of the list if the token still works",
    )
    # A weights source that trickles must not hold a load for its 30-minute timeout (issue 34): the node abandons
    # a transfer slower than this floor over this window, reports a peer as stalled, and goes on from the next
    # source. Bounded so that no setting makes the floor meaningless: at least 5 s (a few reads), at most 10 min
    # (a third of the load timeout); a floor of 1 KiB/s to 1 GiB/s (the slowest and the fastest links planned for).
    weights_floor_mib_s: float = Field(
        default=1.0,
        ge=1 / 1024,
        le=1024,
        description="MiB/s a node's weights transfer (from a peer or the origin) must keep over"
        " weights_floor_window_s; slower, it is abandoned, a peer reported stalled, and the next source tried",
    )
    weights_floor_window_s: float = Field(
        default=30.0,
        ge=5,
        le=600,
        description="seconds over which a weights transfer's rate is measured against weights_floor_mib_s",
    )
    admin_key: SecretStr | None = Field(
        default=None,
        description="a whole admin API key, berth_<12 hex>_<secret>, that `berth server` makes sure"
        " exists at start-up: the first admin key of a deployment (a Secret's value)",
    )
    fleet: bool = Field(
        default=True,
        description="self-hosted models run on GPU nodes through the pool; false:"
        " every model is called at engine_url, without leases",
    )
    load_time_scale: float = Field(
        default=0.25, ge=0, description="multiplies the load time of replicas on the simulated nodes `berth up` starts"
    )
    node_lost_after_s: float = Field(default=20.0, gt=0, description="a node silent this long is lost")
    control_plane_id: str = Field(
        default_factory=socket.gethostname,
        min_length=1,
        max_length=128,
        description="this control-plane replica's name among several on one database (its pool's leases and GPU"
        " reservations carry it); the host name by default, a pod's name on Kubernetes",
    )
    heartbeat_timeout_s: float = Field(
        default=5.0,
        ge=2,
        le=60,
        description="a generation silent this long makes its node suspect: the step asks for evidence about the"
        " node, goes on there if it is alive and resumes elsewhere if it is gone (a generation beats every 0.5 s)",
    )
    reconcile_every_s: float = Field(
        default=5.0,
        ge=0.5,
        le=600,
        description="how often the control plane compares unfinished tasks with their workflows in Temporal:"
        " marks a task whose workflow task keeps failing as stuck, and ends the row of a workflow that ended",
    )
    reconcile_batch: int = Field(
        default=100,
        ge=1,
        le=10_000,
        description="at most this many tasks are compared each time (least recently updated first, then the"
        " next ones): a large backlog is covered over several rounds instead of stalling one",
    )
    submit_rate_per_s: float = Field(
        default=100.0, ge=0, description="task submissions a second per API key, after the burst"
    )
    submit_burst: int = Field(default=2000, ge=1, description="task submissions one API key may send at once")
    engine_latency_scale: float = Field(
        default=1.0, ge=0, description="multiplies the simulated TTFT and per-token time"
    )
    placement_policy: PlacementPolicyName = Field(
        default="berth",
        description="how the pool places steps and scales replicas: berth (its own placement and scaler) or"
        " k8s-spread (the Kubernetes Service + HPA baseline the simulator compares with, for measuring both live)",
    )
    # Placement's weights and priors (orchestrator/pool/weights.py); unset keeps the derived default. Each scorer's
    # raw value is turned into seconds of expected time to first token, so every weight is in seconds per unit.
    placement_cost_s_per_usd: float | None = Field(
        default=None, ge=0, le=100_000, description="seconds of TTFT one dollar of GPU time is worth (default 60)"
    )
    placement_fragmentation_s: float | None = Field(
        default=None, ge=0, le=100_000, description="seconds of TTFT one whole large GPU left stranded costs (20)"
    )
    placement_capacity_class_s: float | None = Field(
        default=None,
        ge=0,
        le=100_000,
        description="seconds of TTFT a step on the wrong capacity class costs: spot"
        " for interactive work, on-demand for batch (30)",
    )
    placement_affinity_weight: float | None = Field(
        default=None,
        ge=0,
        le=100,
        description="times the prefill seconds a replica holding the task's prefix saves (1)",
    )
    placement_spot_preemption_risk: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="the share of work on a spot node expected to be reclaimed and redone,"
        " for a node without its own measured risk (0.15)",
    )
    placement_affinity_max_queue_s: float | None = Field(
        default=None,
        ge=0,
        le=3600,
        description="seconds of queued work on the previous replica past which its"
        " prefix is taken for evicted and affinity dropped (10)",
    )
    placement_replica_min_hold_s: float | None = Field(
        default=None,
        ge=0,
        le=86_400,
        description="seconds a new replica's GPUs are counted held after its last lease, in its cost (300)",
    )

    @property
    def placement_overrides(self) -> dict[str, float]:
        """The placement settings an operator set, by the placement config's names (`weights.` for a weight)."""
        named = {
            "weights.cost": self.placement_cost_s_per_usd,
            "weights.fragmentation": self.placement_fragmentation_s,
            "weights.capacity_class": self.placement_capacity_class_s,
            "weights.affinity": self.placement_affinity_weight,
            "spot_preemption_risk": self.placement_spot_preemption_risk,
            "affinity_max_queue_s": self.placement_affinity_max_queue_s,
            "replica_min_hold_s": self.placement_replica_min_hold_s,
        }
        return {name: value for name, value in named.items() if value is not None}

    @property
    def resolved_temporal_ui_url(self) -> str | None:
        """The Temporal UI to link to: the one configured, else the embedded dev server's (none for an outside
        Temporal whose UI Berth was not told of)."""
        if self.temporal_ui_url:
            return self.temporal_ui_url.rstrip("/")
        return None if self.temporal_address else f"http://{self.host}:{self.temporal_ui_port}"

    @property
    def admin_key_path(self) -> Path:
        """Where `berth up` leaves the first admin key (mode 0600), and where `berth` looks for one."""
        return self.data_dir / "admin-key"

    @property
    def resolved_temporal_address(self) -> str:
        return self.temporal_address or f"{self.host}:{self.temporal_port}"

    @property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{(self.data_dir / 'berth.db').resolve()}"

    @property
    def resolved_engine_url(self) -> str:
        return self.engine_url or f"http://{self.host}:{self.engine_port}/v1"

    @property
    def resolved_api_url(self) -> str:
        return self.api_url or f"http://{self.host}:{self.api_port}"

    @classmethod
    def load(cls, **overrides: object) -> BerthConfig:
        """Defaults < environment < explicit overrides (flags); `None` overrides are ignored. A secret setting
        (SECRET_SETTINGS) comes from its variable or the file its `_FILE` variable names; one that cannot be
        used raises SecretSettingRefused, naming the variable."""
        given = {k: v for k, v in overrides.items() if v is not None}
        values: dict[str, object] = {}
        for name in cls.model_fields:
            variable = ENV_PREFIX + name.upper()
            if name in given:
                continue  # a flag wins: the environment's value, or its file, is not read
            env = secret_setting(variable) if name in SECRET_SETTINGS else os.environ.get(variable)
            if env is not None and env != "":
                values[name] = env
        values.update(given)
        return cls.model_validate(values)

    def to_env(self) -> dict[str, str]:
        """The environment that hands this configuration to a child process."""
        env = {}
        for name in type(self).model_fields:
            value = getattr(self, name)
            if isinstance(value, SecretStr):
                value = value.get_secret_value()  # str() of it is "**********"
            if value is not None:
                env[ENV_PREFIX + name.upper()] = str(value)
        return env
