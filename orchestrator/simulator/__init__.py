"""`berth simulate`: a discrete-event simulation of a GPU fleet under an agent workload, in virtual time.

It drives the pool's own placement, admission, queueing and scaling code (orchestrator/pool) against
simulated nodes, so the `berth` policy it reports on is the one the live pool runs; the baselines
(`k8s-spread`, `bin-pack`, `random`, `always-warm`) replace only the placement and scaling decisions.
"""
