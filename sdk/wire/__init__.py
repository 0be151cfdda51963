"""The wire between Berth's own processes: what the API, the workflows, the activities and the node agents
send one another (leases, node heartbeats, step books, the workflow's input and contracts) and the limits
every side checks.

It is not the agent author's surface (that is `sdk` itself, sealed by its `__all__`): these modules change
with the control plane and its nodes, and only Berth's packages import them. They live in the SDK's
distribution because the SDK's own client and tool worker speak parts of the same wire.
"""
