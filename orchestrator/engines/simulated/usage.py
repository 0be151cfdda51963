"""The simulated engine's usage journal is every Berth engine's (`orchestrator.engines.usage`)."""

from orchestrator.engines.usage import NO_TASK, UsageCounts, UsageTally

__all__ = ["NO_TASK", "UsageCounts", "UsageTally"]
