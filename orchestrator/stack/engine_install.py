"""Whether the real model's engine (llama-cpp-python) is installed yet, for a stack that starts before it is.

`make up` builds llama.cpp in the background on a machine's first run (minutes of compiling); the stack's CPU
node waits for it instead of the demo waiting. The package becomes importable the moment its installer has
written it, so the check is a cheap spec lookup, confirmed once by importing it in a child interpreter (a
half-written package, or a build whose library does not load here, must not start a node that then dies).
"""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys
import time

CONFIRM_EVERY_S = 10.0  # between imports tried in a child, while the package is there but does not load yet


class EngineInstall:
    """Answers `ready()` cheaply and often (the supervisor asks at every tick); True stays True."""

    def __init__(self, module: str = "llama_cpp") -> None:
        self.module = module
        self._ready = False
        self._tried_at = -CONFIRM_EVERY_S

    def ready(self) -> bool:
        if self._ready:
            return True
        importlib.invalidate_caches()  # the installer wrote site-packages after this interpreter listed it
        if importlib.util.find_spec(self.module) is None:
            return False
        now = time.monotonic()
        if now - self._tried_at < CONFIRM_EVERY_S:
            return False
        self._tried_at = now
        loaded = subprocess.run([sys.executable, "-c", f"import {self.module}"], capture_output=True, timeout=60)
        self._ready = loaded.returncode == 0
        return self._ready
