"""The first admin key of a local stack: made by `berth up`, kept in <data_dir>/admin-key.

Whoever runs `berth up` owns the data dir and its database, so handing them an admin key
gives nothing away; it is what lets the demo, the CLI and the tool worker call an API that
refuses every request without a key. The file is readable by its owner only (0600).
"""

from __future__ import annotations

import os
from pathlib import Path

from sdk import Unauthorized
from sdk.wire.identity import Role

from ..store import Store


def ensure_admin_key(store: Store, path: Path) -> tuple[str, bool]:
    """The admin key in `path` while it is valid; else a new one written there. True when new."""
    try:
        kept = path.read_text().strip()
    except OSError:
        kept = ""
    if kept:
        try:
            holder = store.keys.authenticate(kept)
        except Unauthorized:
            holder = None
        if holder is not None and holder.role == Role.admin:
            return kept, False
    created = store.keys.create(Role.admin, name="berth up", description=f"made by `berth up`, kept in {path}")
    path.parent.mkdir(parents=True, exist_ok=True)
    # Created with 0600 before the secret is written, so it is never readable by others, even briefly.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(created.key + "\n")
    os.chmod(path, 0o600)  # an older file's mode is kept by O_CREAT; set it again
    return created.key, True
