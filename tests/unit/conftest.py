"""Fixtures of the unit tests: a real store in a fresh database per test.

SQLite (a new file) by default. A module marked `pytest.mark.postgresql` runs each of its tests
that use the store on both SQLite and PostgreSQL (a new database on the session's server,
tests/postgres.py): the store and pool suites, whose SQL must mean the same on both.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.store import Store
from tests.postgres import postgres_server, postgres_url  # noqa: F401  (fixtures of the PostgreSQL runs)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "db_url" in metafunc.fixturenames and metafunc.definition.get_closest_marker("postgresql"):
        metafunc.parametrize("db_url", ["sqlite", "postgresql"], indirect=True)


@pytest.fixture
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if getattr(request, "param", "sqlite") == "postgresql":
        return request.getfixturevalue("postgres_url")
    return f"sqlite:///{tmp_path / 'berth.db'}"


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    s = Store.open(db_url)
    yield s
    s.close()
