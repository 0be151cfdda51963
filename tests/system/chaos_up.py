"""`berth` as the chaos tests run it: `python -m tests.system.chaos_up up …` is `berth up …` with two settings.

- Every restart of a child that died comes after the supervisor's first pause (1 s). Its growing pause (up to
  30 s for a child that dies again within a minute of its start) is right for a crash loop, but the chaos tests
  kill the worker every few seconds on purpose: fifty kills would spend most of their half hour waiting.
- Temporal suggests continue-as-new after 200 events (as the workflow suites' dev server does,
  `tests.conftest.CONTINUE_AS_NEW_AFTER_EVENTS`), so a task of twenty steps continues as new under the kills, as a task of
  hundreds of steps would on Temporal's defaults.

Nothing else changes: the children, their commands and the supervisor are `berth up`'s own.
"""

from __future__ import annotations

import sys
from typing import Any

from orchestrator.cli.main import main
from orchestrator.stack import supervisor, up

CONTINUE_AS_NEW_AFTER_EVENTS = 200

_stack_children = up.stack_children


def _children_with_an_eager_continue_as_new(*args: Any, **kwargs: Any) -> list[supervisor.ChildSpec]:
    specs = _stack_children(*args, **kwargs)
    for spec in specs:
        if spec.name == "temporal":
            spec.argv += [
                "--dynamic-config-value",
                f"limit.historyCount.suggestContinueAsNew={CONTINUE_AS_NEW_AFTER_EVENTS}",
            ]
    return specs


if __name__ == "__main__":
    supervisor.RESTART_BACKOFF_S = (1.0,)
    up.stack_children = _children_with_an_eager_continue_as_new
    sys.exit(main())
