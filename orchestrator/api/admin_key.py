"""BERTH_ADMIN_KEY: the first admin key of a deployment, chosen by its operator and kept in a Secret.

`berth up` makes the first admin key of a local stack and writes it to the data dir; a server on a
cluster has no such place, and its API refuses every request without a key. So the operator makes a
key in Berth's own format (`berth_<12 hex>_<secret>`), hands it to every server replica, and each one
makes sure at start-up that the key exists: the first start stores its sha256 as an admin key, later
starts (and replicas starting together) find it there and change nothing.

Anything doubtful stops the server instead of being worked around: a value that is not a key of this
format, a secret too short to stand in for the 32 random bytes Berth's own keys hold (the store keeps a
plain sha256, as strong as the secret only), or a key id the store already holds with another secret
(overwriting it would silently hand that key to whoever set the variable). Messages and logs name the
variable and the key id; the secret appears in neither.
"""

from __future__ import annotations

import logging
import re

from pydantic import SecretStr

from sdk.wire.identity import KEY_PREFIX, Role

from ..store import KeyConflict, Store
from ..store.keys import split_key

log = logging.getLogger("berth.api")

ADMIN_KEY_ENV = "BERTH_ADMIN_KEY"
KEY_ID = re.compile(r"[0-9a-f]{12}")  # what SqlApiKeys.create makes: 6 random bytes in hex
SECRET = re.compile(r"[A-Za-z0-9_-]+")  # secrets.token_urlsafe's alphabet
# secrets.token_urlsafe(32), Berth's own secrets, is 43 characters; 32 of this alphabet still hold 192 bits.
MIN_SECRET_CHARS = 32
HOW_TO_MAKE = (
    "make one with: python3 -c 'import secrets; "
    'print("berth_" + secrets.token_hex(6) + "_" + secrets.token_urlsafe(32))\''
)


class AdminKeyRefused(Exception):
    """BERTH_ADMIN_KEY cannot be used; the message names the variable and why, never the secret."""


def parse_admin_key(value: str) -> tuple[str, str]:
    """(key id, secret) of a BERTH_ADMIN_KEY value; AdminKeyRefused, saying what is wrong, otherwise."""
    parts = split_key(value.strip())
    if parts is None:
        raise AdminKeyRefused(f"{ADMIN_KEY_ENV} is malformed: a key reads {KEY_PREFIX}<key id>_<secret>; {HOW_TO_MAKE}")
    key_id, secret = parts
    if not KEY_ID.fullmatch(key_id):
        raise AdminKeyRefused(
            f"{ADMIN_KEY_ENV} is malformed: its key id (the part between {KEY_PREFIX} and the "
            f"next _) is not 12 lowercase hex characters; {HOW_TO_MAKE}"
        )
    if not SECRET.fullmatch(secret):
        raise AdminKeyRefused(
            f"{ADMIN_KEY_ENV} is malformed: the secret of key {key_id} may hold only A-Z a-z 0-9 _ -; {HOW_TO_MAKE}"
        )
    if len(secret) < MIN_SECRET_CHARS:
        raise AdminKeyRefused(
            f"{ADMIN_KEY_ENV} is too weak: the secret of key {key_id} has {len(secret)} "
            f"characters, at least {MIN_SECRET_CHARS} are needed; {HOW_TO_MAKE}"
        )
    return key_id, secret


def install_admin_key(store: Store, value: SecretStr) -> bool:
    """Make sure the admin key in BERTH_ADMIN_KEY exists; True when this call made it. AdminKeyRefused when
    the value is malformed or its key id is already another key."""
    key_id, secret = parse_admin_key(value.get_secret_value())
    try:
        view, created = store.keys.install(
            key_id,
            secret,
            Role.admin,
            name="BERTH_ADMIN_KEY",
            description=f"the deployment's first admin key, from {ADMIN_KEY_ENV}",
        )
    except KeyConflict as exc:
        raise AdminKeyRefused(
            f"{ADMIN_KEY_ENV} conflicts with the store: {exc}. Berth never overwrites a key; "
            f"set {ADMIN_KEY_ENV} to the key that was stored, or to a key with a new id"
        ) from None
    if created:
        log.info("admin key %s from %s stored", key_id, ADMIN_KEY_ENV)
    elif view.revoked_at is not None:
        log.warning(
            "admin key %s from %s was revoked at %s and stays revoked",
            key_id,
            ADMIN_KEY_ENV,
            f"{view.revoked_at:%Y-%m-%d %H:%M:%S} UTC",
        )
    else:
        log.info("admin key %s from %s is already stored", key_id, ADMIN_KEY_ENV)
    return created
