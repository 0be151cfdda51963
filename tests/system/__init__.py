"""The system tests: a package, so that the plain `berth up` they share (a package-scoped fixture) is
started once for all of them and stopped after the last."""
