"""Browser tests: the admin UI of a real `berth up`, driven through Debian's chromium by Playwright.

One stack and one chromium for the browser tests (package-scoped: see __init__.py) (starting a stack costs half a minute on two
cores, a browser context milliseconds), a fresh context (no cookies) per test; tests use task ids
of their own, and put back what they change on the fleet.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, Playwright, sync_playwright

from orchestrator.stack.fleet import DEFAULT_FLEET
from tests.browser.ui import ARTIFACTS, CHROMIUM, Ui
from tests.system.conftest import Stack, wait_for_healthy_nodes

# Flags for a headless run on a CI box: no sandbox (root in a container), and nothing that
# would phone home or spend the two CPUs on background work while the stack runs.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="package")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """`berth up` with its default fleet and fast simulated engines, once every node has joined
    (the Fleet page and the tasks' first steps need them)."""
    s = Stack.create(tmp_path_factory.mktemp("ui-stack"), latency_scale=0.3, load_time_scale=0.02)
    s.start()
    try:
        wait_for_healthy_nodes(s, len(DEFAULT_FLEET))
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="package")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="package")
def browser(playwright: Playwright) -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"{CHROMIUM} is missing: the browser tests drive Debian's chromium; `make test` installs it "
            f"(or: apt-get install chromium)",
            pytrace=False,
        )
    b = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
    try:
        yield b
    finally:
        b.close()


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    c = browser.new_context(viewport={"width": 1280, "height": 900})
    c.set_default_timeout(15_000)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def ui(context: BrowserContext, stack: Stack, request: pytest.FixtureRequest) -> Ui:
    """A page of the stack's UI that screenshots what it visits under tests/browser/artifacts/."""
    ARTIFACTS.mkdir(exist_ok=True)
    for stale in ARTIFACTS.glob(f"{request.node.name}--*.png"):
        stale.unlink()
    return Ui(context.new_page(), stack.api, request.node.name)
