"""Timeouts and retry policies shared by the workflow's activity calls, with their reasons."""

from __future__ import annotations

from datetime import timedelta

from temporalio.common import RetryPolicy

# Bookkeeping is a local SQLite write: seconds are plenty, and a few retries ride out a busy lock. Each call
# site names both, so a reader (and the type checker) sees the timeout where the activity is called.
BOOKKEEPING_TIMEOUT = timedelta(seconds=30)
BOOKKEEPING_RETRY = RetryPolicy(maximum_attempts=10)
