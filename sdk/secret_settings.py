"""How Berth's processes read a secret setting: from its variable (BERTH_ADMIN_KEY), or from the file its `_FILE`
variable names (BERTH_ADMIN_KEY_FILE=/etc/berth/secrets/admin-key), as Docker's and Kubernetes' secrets are mounted.

A value in the environment is in /proc/PID/environ, inherited by every child process and written into crash
reports; a file is read once, by the process that needs it. The file holds the value alone; trailing newlines
(what `echo` and most editors leave) are not part of it. Both forms at once, a file that cannot be read or an empty
one are refused, naming the variable, before the process does anything: a secret quietly taken from the wrong
place, or a blank one, would fail later and far from its cause.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from ._errors import SecretSettingRefused

FILE_SUFFIX = "_FILE"

__all__ = ["FILE_SUFFIX", "SecretSettingRefused", "secret_setting"]


def secret_setting(variable: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The value of `variable`, else the content of the file `<variable>_FILE` names, else None (an empty
    variable counts as unset, as Berth's settings read them)."""
    env = os.environ if environ is None else environ
    value, path = env.get(variable) or None, env.get(variable + FILE_SUFFIX) or None
    if path is None:
        return value
    file_variable = variable + FILE_SUFFIX
    if value is not None:
        raise SecretSettingRefused(
            f"{variable} and {file_variable} are both set: give the secret one way, as its value or as a file",
            field=file_variable,
        )
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise SecretSettingRefused(f"{path} is not UTF-8 text", field=file_variable) from None
    except OSError as exc:
        raise SecretSettingRefused(f"cannot read {path}: {exc.strerror or exc}", field=file_variable) from None
    secret = text.rstrip("\r\n")
    if not secret:
        raise SecretSettingRefused(f"{path} is empty", field=file_variable)
    return secret
