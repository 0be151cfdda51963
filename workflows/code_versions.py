"""How Berth's workflow code changes without wedging the tasks already running.

A worker rebuilds a running task by replaying its history on the code it runs; code that issues other commands
than the history holds fails every workflow task of that run (a nondeterminism error) and the task never moves
again. Berth's rule, kept by every workflow:

1. A change to the commands the code issues branches on the run's `workflow_version` (its input, TaskRun,
   carries it: fixed in the run's first event, so every worker, live or replaying, takes the same branch at
   every point of the run). A run keeps its version until it continues as new, which starts the next run on
   the build's current version. The version is raised once per release that changes commands, not per change.
2. No `workflow.patched()`. A patch's answer depends on the workflow task the call lands in (Core announces a
   history's patch markers one workflow task at a time), and Berth's code does not land in the same workflow
   task live and on replay: when a query reaches a worker while a local activity runs, Core answers it,
   closes the workflow task with the activity's marker and gives the workflow the result in the next one,
   while a replay (which has no queries) gives it in the marker's own. Runs started before versions existed
   (version 0) carry three patch markers; `legacy_patched` reads them as their histories decided.
3. Nothing that chooses commands reads the clock or Temporal's continue-as-new hint where a local activity
   could have just returned (the same shift moves what they say): runs of version 1 on read them through
   an EventClock, set only at moments that a history event fixes (see event_clock.py).
4. A build ships only when the recorded histories under tests/replay replay on it (`make test`); an operator
   upgrades only after `berth replay` says the running tasks' histories replay on the new build.
"""

from __future__ import annotations

import json

from temporalio import workflow

# Runs started before versions existed: three behaviours were added under patches (their ids live beside them).
LEGACY = 0
# The clock and the continue-as-new hint are read at event-fixed moments; no patches.
EVENT_CLOCK = 1
# The search attribute Core upserts beside each patch marker: the run's patch ids so far.
_PATCH_IDS_ATTRIBUTE = "TemporalChangeVersion"


def legacy_patched(patch_id: str) -> bool:
    """`workflow.patched(patch_id)` for a version-0 run, as its history decided.

    Live, on a replay of the workflow task that holds the marker, or asked again, this is `patched()` itself. A
    replay that reaches the call before Core has announced the marker (a query moved the live code one workflow
    task later, past a local activity: rule 2) cannot wait for it: the SDK wakes no coroutine on an activation
    that only announces a patch, and the commands must be in this workflow task's completion. Every version-0
    run was written by builds whose `patched()` said yes live, so the marker is ahead: the commands Core would
    have made for it (the marker, and its search-attribute upsert) are issued here, in the order it would.
    """
    instance = workflow._Runtime.current()
    notified: set[str] = getattr(instance, "_patches_notified")  # noqa: B009  (the SDK's own, not typed)
    memoized: dict[str, bool] = getattr(instance, "_patches_memoized")  # noqa: B009
    if not workflow.unsafe.is_replaying() or patch_id in notified or patch_id in memoized:
        return workflow.patched(patch_id)
    memoized[patch_id] = True
    add_command = getattr(instance, "_add_command")  # noqa: B009
    add_command().set_patch_marker.patch_id = patch_id
    ids = sorted({p for p, used in memoized.items() if used})
    upsert = add_command().upsert_workflow_search_attributes.search_attributes.indexed_fields[_PATCH_IDS_ATTRIBUTE]
    upsert.metadata["encoding"] = b"json/plain"
    upsert.metadata["type"] = b"KeywordList"
    upsert.data = json.dumps(ids, separators=(",", ":")).encode()
    return True
