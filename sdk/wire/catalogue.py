"""The model catalogue and per-model scaling policy, as the API, CLI and SDK exchange them."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, FiniteFloat, field_validator, model_validator

from .._refusal import refused_at
from .limits import numbers_not_booleans

TENSOR_PARALLEL_DEGREES = (1, 2, 4, 8)  # what vLLM shards across on one node's NVLink domain


# What serves a self-hosted model's replicas; a node says which of them it runs (NodeSpec.engines).
EngineKind = Literal["simulated", "vllm", "sglang", "llama.cpp", "openai-compatible"]
ORIGIN_SCHEMES = ("file", "http", "https", "s3", "hf", "package")
SHA256 = r"^[0-9a-f]{64}$"


class WeightsFile(BaseModel):
    """One file of a model revision: its path within the revision, what it hashes to, how big it is."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(
        pattern=r"^[A-Za-z0-9_.+-][A-Za-z0-9_.+/-]{0,254}$",
        description="relative, no '..': where the file lies under the revision's origin and cache entry",
    )
    sha256: str = Field(pattern=SHA256)
    size_bytes: int = Field(gt=0, le=2**44)

    _numbers = numbers_not_booleans("size_bytes")

    @field_validator("path")
    @classmethod
    def _inside_the_revision(cls, path: str) -> str:
        if any(part in ("", ".", "..") for part in path.split("/")):
            raise ValueError("must stay inside the revision: no empty, '.' or '..' parts")
        return path


class WeightsSource(BaseModel):
    """Where a model's real weights come from and exactly which bytes they are.

    `origin` is the revision's root: `file:///…`, `https://…`, `s3://bucket/prefix`, `hf://org/model@rev`
    or `package://python_package/subdir` (weights shipped inside an installed Python package). Every file
    is named with its sha256, so a node's cache is content-addressed and a copy from any peer is checked.
    """

    model_config = ConfigDict(extra="forbid")

    origin: str = Field(min_length=1, max_length=2048)
    revision: str = Field(default="main", pattern=r"^[A-Za-z0-9_.-]{1,128}$")
    files: list[WeightsFile] = Field(min_length=1, max_length=4096)
    tokenizer: str | None = Field(
        default=None, description="the file holding the tokenizer: tokenizer.json, or a GGUF file's own vocabulary"
    )

    @property
    def size_bytes(self) -> int:
        return sum(f.size_bytes for f in self.files)

    @field_validator("origin")
    @classmethod
    def _known_scheme(cls, origin: str) -> str:
        scheme, sep, rest = origin.partition("://")
        if not sep or scheme not in ORIGIN_SCHEMES or not rest:
            raise ValueError(f"origin must be <scheme>://… with a scheme among {', '.join(ORIGIN_SCHEMES)}")
        return origin

    @model_validator(mode="after")
    def _consistent(self) -> WeightsSource:
        paths = [f.path for f in self.files]
        if len(set(paths)) != len(paths):
            raise refused_at("WeightsSource", ("files",), "each path may appear once", paths)
        if self.tokenizer is not None and self.tokenizer not in paths:
            raise refused_at("WeightsSource", ("tokenizer",), "must be one of the files", self.tokenizer)
        return self


class ModelEntry(BaseModel):
    """A model a task may name: how big it is, how it is served and routed, what it costs."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}$")
    provider: Literal["self-hosted", "hosted"] = "self-hosted"
    weights_gib: float = Field(default=0.0, ge=0, le=4096, description="weights on disk and in GPU memory")
    kv_headroom_gib: float = Field(default=0.0, ge=0, le=4096, description="GPU memory kept for the KV cache")
    tensor_parallel: list[int] = Field(default_factory=lambda: [1], description="allowed degrees")
    engine: EngineKind = "simulated"
    weights: WeightsSource | None = Field(default=None, description="real weights (none for the simulated engine)")
    engine_args: dict[str, str | int | FiniteFloat | bool] = Field(default_factory=dict)
    litellm_route: str | None = Field(default=None, description="litellm model string; derived when absent")
    # Frontier models charge tens of dollars per million tokens; a thousand is a typo, not a price.
    usd_per_1m_prompt: float | None = Field(default=None, ge=0, le=1000, allow_inf_nan=False)
    usd_per_1m_completion: float | None = Field(default=None, ge=0, le=1000, allow_inf_nan=False)
    context_window: int = Field(default=131_072, ge=256, le=10_000_000)
    api_key_env: str | None = Field(default=None, pattern=r"^[A-Z_][A-Z0-9_]*$")

    @property
    def memory_need_gib(self) -> float:
        return self.weights_gib + self.kv_headroom_gib

    @field_validator("tensor_parallel")
    @classmethod
    def _known_degrees(cls, degrees: list[int]) -> list[int]:
        if not degrees:
            raise ValueError("allow at least one tensor-parallel degree")
        bad = [d for d in degrees if d not in TENSOR_PARALLEL_DEGREES]
        if bad:
            raise ValueError(f"degrees {bad} are not among {list(TENSOR_PARALLEL_DEGREES)}")
        return sorted(set(degrees))

    @model_validator(mode="after")
    def _consistent(self) -> ModelEntry:
        if self.provider == "self-hosted" and self.weights_gib <= 0:
            raise refused_at(
                "ModelEntry", ("weights_gib",), "a self-hosted model needs its weights size (> 0)", self.weights_gib
            )
        if self.engine == "llama.cpp" and (
            self.weights is None or not any(f.path.endswith(".gguf") for f in self.weights.files)
        ):
            raise refused_at("ModelEntry", ("weights",), "a llama.cpp model needs real weights with a .gguf file", None)
        if self.weights is not None and self.provider == "hosted":
            raise refused_at("ModelEntry", ("weights",), "a hosted model's weights are its provider's", None)
        if self.provider == "hosted" and not self.api_key_env:
            raise refused_at(
                "ModelEntry",
                ("api_key_env",),
                "a hosted model needs the variable holding its provider key",
                self.api_key_env,
            )
        return self


class ScalingPolicy(BaseModel):
    """How many replicas of a model to keep, and when to add or remove one."""

    model_config = ConfigDict(extra="forbid")

    min_replicas: int = Field(default=0, ge=0, le=1000, description="0 = scale to zero when idle")
    max_replicas: int = Field(default=4, ge=1, le=1000)
    idle_timeout_s: float | None = Field(
        default=None,
        gt=0,
        le=7 * 24 * 3600,
        description="seconds an idle replica is kept; unset: learned from the model's own idle gaps",
    )
    scaler: Literal["queue_delay", "request_count"] = "queue_delay"
    target: float = Field(
        default=2.0,
        gt=0,
        le=3600,
        allow_inf_nan=False,
        description="seconds of queue delay, or leases per replica (an hour, or 3,600, at most)",
    )
    warm_buffer: int = Field(default=0, ge=0, le=100, description="extra idle replicas kept ready")
    intent_gpu_hours_per_hour: float = Field(
        default=2.0,
        ge=0,
        le=1000,
        allow_inf_nan=False,
        description="GPU-hours per hour replicas pre-warmed for announced steps may sit idle unused; 0 = never",
    )

    _numbers = numbers_not_booleans(
        "min_replicas", "max_replicas", "idle_timeout_s", "target", "warm_buffer", "intent_gpu_hours_per_hour"
    )

    @model_validator(mode="after")
    def _min_not_above_max(self) -> ScalingPolicy:
        if self.min_replicas > self.max_replicas:
            raise refused_at(
                "ScalingPolicy",
                ("min_replicas",),
                f"min_replicas ({self.min_replicas}) is above max_replicas ({self.max_replicas})",
                self.min_replicas,
            )
        return self


KeepAliveSource = Literal["learned", "break-even", "operator"]


class KeepAliveView(BaseModel):
    """One level's keep-alive as the scaler last planned it: level k is the model's k-th replica."""

    level: int
    window_s: float  # an idle replica at this level is kept this long
    prewarm_s: float  # > 0: unloaded at once and loaded again this long after the level went idle
    source: KeepAliveSource
    gaps: int  # idle gaps of the last hours it was learned from


class PrewarmView(BaseModel):
    """A replica the scaler started for steps that had not asked yet, and whether one of them used it."""

    replica_id: str
    started_at: datetime
    reason: str
    used_at: datetime | None = None
    ended_at: datetime | None = None


class ModelForesight(BaseModel):
    """What the scaler learned about a model and did ahead of its demand, as of `updated_at`."""

    keep_alive: list[KeepAliveView] = Field(default_factory=list)
    prewarms: list[PrewarmView] = Field(default_factory=list)  # the most recent first
    announced: int = 0  # steps announced and not arrived yet
    intent_gpu_hours_last_hour: float = 0.0  # of the policy's intent_gpu_hours_per_hour
    # Of the recent grants with per-call latency objectives, the share placement predicted to meet them, and the
    # strictest attainment target they asked for; None without such grants in the pool's attainment window.
    slo_attainment: float | None = None
    slo_target: float | None = None
    updated_at: datetime

    def level(self, level: int) -> KeepAliveView | None:
        """The keep-alive of the model's `level`-th replica, if the scaler planned one."""
        return next((k for k in self.keep_alive if k.level == level), None)


class CatalogueModel(BaseModel):
    """A catalogue entry with its scaling policy, as listed by the API, and what the scaler learned of it
    (absent until the scaler has planned for it)."""

    entry: ModelEntry
    policy: ScalingPolicy
    foresight: ModelForesight | None = None


class PrewarmRequest(BaseModel):
    """Put a model's weights on the disks of the nodes that could serve it, ahead of demand."""

    model_config = ConfigDict(extra="forbid")

    datacenter: str | None = Field(default=None, description="only nodes in this datacenter; all when absent")


class PrewarmTarget(BaseModel):
    """One node a prewarm started on, where it fetches the weights from, and the workflow doing it."""

    node_id: str
    source: Literal["datacenter", "origin"]  # sdk.wire.node_io.FetchSource (that module imports this one)
    workflow_id: str


class PrewarmStarted(BaseModel):
    """The prewarms started for a model, one per node; empty when every fitting node has the weights."""

    model: str
    nodes: list[PrewarmTarget] = Field(default_factory=list)
