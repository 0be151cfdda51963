"""The control plane's reconciler: tasks whose workflows are stuck, or ended, in Temporal are shown as such."""

from .reconciler import FAILING_EVENT, RECONCILER_JOB, RECOVERED_EVENT, Reconciler, Round

__all__ = ["FAILING_EVENT", "RECONCILER_JOB", "RECOVERED_EVENT", "Reconciler", "Round"]
