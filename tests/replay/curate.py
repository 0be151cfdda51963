"""Pick the recorded corpus out of a suite run's exported histories.

    BERTH_EXPORT_HISTORIES=/tmp/h .venv/bin/pytest tests/workflow tests/api tests/security tests/system
    .venv/bin/python -m tests.replay.curate /tmp/h tests/replay/histories/v1

Each scenario names the test whose runs cover it; every run of the chosen workflow is kept (a continue-as-new
chain or a parent and its sub-agents stay together), named `<scenario>.<n>.history.json`. Run it again when a
release raises CURRENT_WORKFLOW_VERSION, into a folder of the new version: the older folders stay, as the
histories of tasks that may still be running when the release is deployed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

RUNS_PER_SCENARIO = 4  # enough for a parent and its sub-agents, or a continue-as-new chain; the corpus stays small
# scenario → (the exporting test's folder name, contains; a workflow id prefix, or "" for every run it started)
SCENARIOS: dict[str, tuple[str, str]] = {
    "tools-and-answer": ("test_agent_task.py__test_research_task_runs_tools_then_answers", ""),
    "sub-agents": ("test_agent_task.py__test_coordinator_spawns_children_within_its_budget", ""),
    "ask-human": ("test_agent_task.py__test_ask_human_waits_for_an_answer", ""),
    "budget-wait-and-raise": ("test_agent_task.py__test_small_budget_waits_then_resumes_when_raised", ""),
    "deadline-while-waiting": ("test_agent_task.py__test_the_deadline_ends_a_task_that_is_waiting", ""),
    "cancel-during-generation": (
        "test_cancel.py__test_a_cancel_cuts_the_running_generation_and_books_what_it_wrote",
        "",
    ),
    "cancel-during-tool": ("test_cancel.py__test_a_cancel_does_not_wait_for_a_tool_no_worker_runs", ""),
    "no-tool-worker-notice": ("test_agent_task.py__test_a_tool_call_no_worker_serves_says_so_until_a_worker_comes", ""),
    "preemption-mid-answer": (
        "test_fleet_interruptions.py__test_a_step_preempted_mid_answer_continues_its_text_on_another_node",
        "",
    ),
    "lost-node": (
        "test_fleet_interruptions.py__test_a_node_that_goes_quiet_then_dies_leaves_the_text_it_wrote_to_the_next_n",
        "",
    ),
    "revoked-node": (
        "test_node_reply_and_revocation.py__test_a_revoked_node_loses_its_step_even_when_it_never_answers_the_cut",
        "",
    ),
    "fork": ("test_agent_task.py__test_fork_from_a_checkpoint_reruns_from_there", ""),
    "continue-as-new": ("test_agent_task.py__test_long_task_continues_as_new_without_redoing_steps", ""),
    "own-loop-agents-sdk": ("test_api_own_loop.py__test_an_agents_sdk_agent_runs_as_a_task_with_its_calls_booked", ""),
    "own-loop-approvals": ("test_api_loop_approvals.py__test_each_call_of_a_run_waits_for_its_own_decision", ""),
    "own-loop-approval-rerun": (
        "test_api_loop_approvals.py__test_a_loop_killed_while_waiting_resumes_from_the_state_the_task_holds",
        "",
    ),
    "own-loop-approval-then-silent": (
        "test_api_loop_approvals.py__test_an_approval_wait_does_not_count_as_the_loop_falling_silent",
        "",
    ),
    "own-loop-short-of-budget": (
        "test_api_own_loop.py__test_a_call_short_of_budget_is_402_and_the_task_waits_for_more",
        "",
    ),
    "prewarm": ("test_api_prewarm.py__test_prewarm_starts_one_workflow_per_node_that_lacks_the_weights", ""),
    "mcp-tools": ("test_mcp_tools.py__test_an_agent_calls_its_mcp_servers_tools_as_activities", ""),
    "stack-worker-killed": ("stack_", "default_sys-kill-worker"),
    "stack-restarted": ("stack_", "default_sys-restart"),
    "node-killed": ("stack_", "default_chaos-kill-9"),
    "node-preempted-with-notice": ("stack_", "default_chaos-preempt"),
    "node-stopped-with-sigterm": ("stack_", "default_chaos-sigterm"),
    "temporal-killed": ("stack_", "default_chaos-temporal-a"),
    "chaos-worker-killed": ("stack_", "default_chaos-worker"),
    "replica-load": ("stack_", "load-r-"),
    "replica-unload": ("stack_", "unload-r-"),
}


def curate(exported: Path, into: Path) -> list[Path]:
    into.mkdir(parents=True, exist_ok=True)
    written = []
    for scenario, (test, prefix) in SCENARIOS.items():
        folders = sorted(f for f in exported.iterdir() if test in f.name)
        runs = sorted(r for f in folders for r in f.glob("*.json") if r.name.startswith(prefix))[:RUNS_PER_SCENARIO]
        if not runs:
            print(f"missing: {scenario} (no export of {test})", file=sys.stderr)
            continue
        for n, run in enumerate(runs, 1):
            target = into / f"{scenario}.{n}.history.json"
            target.write_text(json.dumps(json.loads(run.read_text()), separators=(",", ":")) + "\n")
            written.append(target)
    return written


if __name__ == "__main__":
    print(f"{len(curate(Path(sys.argv[1]), Path(sys.argv[2])))} histories written")
