"""A tool worker for a remote Berth stack, connecting as any client does: with a tenant's key, and Temporal's
address and credentials from the environment (as Temporal's own CLI reads them).

    BERTH_API_URL=https://berth.example.com BERTH_API_KEY=<an agent key of your tenant> \\
    TEMPORAL_ADDRESS=temporal.example.com:7233 TEMPORAL_NAMESPACE=berth TEMPORAL_API_KEY=... \\
        python examples/remote_tool_worker.py

It registers its agent through Berth's API with the key (the key's tenant owns the agent), then runs the
agent's tool for every task that calls it, until Ctrl-C (or SIGTERM). Submit to it from anywhere that holds a
key of the same tenant:

    berth tasks submit inventory-example "widgets; gadgets" --tokens 20000 --wait
"""

from __future__ import annotations

from sdk import Agent, serve_blocking, tool

STOCK = {"widgets": 120, "gadgets": 0, "sprockets": 43}


@tool
def stock(item: str) -> str:
    """How many of an item the warehouse holds."""
    count = STOCK.get(item.strip().lower())
    return f"{item}: not a catalogue item" if count is None else f"{item}: {count} in stock"


inventory = Agent("inventory-example", "llama-3.2-1b", "Check the stock of each item, then report.", [stock])


if __name__ == "__main__":
    serve_blocking(inventory)  # a service manager's SIGTERM stops it as Ctrl-C does
