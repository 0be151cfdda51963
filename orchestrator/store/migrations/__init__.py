"""Alembic's script directory for the control-plane schema: `env.py` and one file per revision.

Migrations run at start-up (orchestrator/store/migrate.py), on the connection the store opened;
a new schema change is a new revision here:

    .venv/bin/alembic -c orchestrator/store/migrations/alembic.ini revision --autogenerate -m "why"
"""
