"""The wire between Berth's own processes, and the pure rules they share: what the API, the workflows, the
activities and the node agents send one another (leases, node heartbeats, step books, the workflow's input and
contracts), the limits every side checks, and the rules more than one side applies (the reserve rule and the token
allowance, the answer a call may ask for, prices, dead attempts, ledger rows, recovery). No I/O, no Temporal, no
telemetry: the workflow sandbox and the simulator import it as freely as the control plane.

It is not the agent author's surface (that is `sdk` itself, sealed by its `__all__`): these modules change
with the control plane and its nodes, and only Berth's packages import them. They live in the SDK's
distribution because the SDK's own client and tool worker speak parts of the same wire.
"""
