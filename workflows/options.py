"""Timeouts and retry policies shared by the workflow's activity calls, with their reasons."""

from __future__ import annotations

from datetime import timedelta

from temporalio.common import RetryPolicy

# Bookkeeping is a local SQLite write: seconds are plenty, and a few retries ride out a busy lock.
BOOKKEEPING = dict(start_to_close_timeout=timedelta(seconds=30), retry_policy=RetryPolicy(maximum_attempts=10))
