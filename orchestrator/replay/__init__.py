"""Replay: does the workflow code of this build replay the histories Berth has written?

A Temporal worker rebuilds a running task by replaying its history on the code it runs. A change that makes
the code issue other commands than the history recorded wedges the task: every workflow task fails with a
nondeterminism error. This package is the judge of that, used by the test suite (the recorded corpus and
every stack's histories) and by operators before an upgrade (`berth replay`).
"""
