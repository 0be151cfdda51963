"""Checkpoint storage: 300 steps, each adding 1 KB to the conversation.

Goal: everything stored ≤ 2× the conversation's final size (a checkpointer that saves the
whole state each step stores ~45 MB for this). The baseline, run here in the same process
on the same database, writes a full snapshot per step, the way such checkpointers do.

    python -m benchmarks.checkpoint_storage
"""

from __future__ import annotations

import json
import random
import string
import tempfile
from pathlib import Path

from orchestrator.store import Store
from sdk import Message

from ._results import write_results

STEPS = 300
BYTES_PER_STEP = 1024


def _message(step: int) -> Message:
    """1 KB of text that compresses like prose (random words), so compression cannot flatter the figure."""
    rng = random.Random(step)
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < BYTES_PER_STEP:
        words.append("".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 9))))
    return Message(role="assistant" if step % 2 else "tool", content=" ".join(words)[:BYTES_PER_STEP])


def main() -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        store = Store.open(f"sqlite:///{Path(tmp) / 'bench.db'}")
        ref = store.checkpoints.write_root("delta", [Message(role="user", content="start")], {})
        for step in range(1, STEPS + 1):
            ref = store.checkpoints.append("delta", ref, step, [_message(step)], {}, {"step": step})
        conversation = store.checkpoints.read(ref.id).messages
        final_size = len(json.dumps([m.model_dump(mode="json") for m in conversation]).encode())
        delta_bytes = store.checkpoints.stored_bytes("delta")

        # Baseline: the whole conversation stored at every step.
        snapshot_bytes = 0
        messages = [Message(role="user", content="start")]
        for step in range(1, STEPS + 1):
            messages.append(_message(step))
            snapshot_bytes += len(json.dumps([m.model_dump(mode="json") for m in messages]).encode())
        db_file = (Path(tmp) / "bench.db").stat().st_size

    figures = {
        "steps": STEPS,
        "bytes_per_step": BYTES_PER_STEP,
        "final_conversation_bytes": final_size,
        "berth_stored_bytes": delta_bytes,
        "berth_stored_over_final": round(delta_bytes / final_size, 3),
        "full_snapshot_baseline_bytes": snapshot_bytes,
        "baseline_over_berth": round(snapshot_bytes / delta_bytes, 1),
        "sqlite_file_bytes_after_run": db_file,
        "goal": "berth_stored_over_final <= 2.0",
    }
    path = write_results("checkpoint_storage", figures)
    print(f"final conversation      {final_size / 1024:8.1f} KiB")
    print(
        f"Berth stored (deltas)   {delta_bytes / 1024:8.1f} KiB  = {figures['berth_stored_over_final']}× final "
        f"(goal ≤ 2×)"
    )
    print(f"full-snapshot baseline  {snapshot_bytes / 1024:8.1f} KiB  = {figures['baseline_over_berth']}× Berth")
    print(f"figures written to {path}")
    return figures


if __name__ == "__main__":
    main()
