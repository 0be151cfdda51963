"""A page of the admin UI as the browser tests drive it: sign in, open, submit, and a screenshot of
every page shown, so a failed run leaves the pages it saw under tests/browser/artifacts/."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from urllib.parse import quote

from playwright.sync_api import APIResponse, Page, Response, expect

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
CSRF_FIELD = "csrf_token"
CSRF_REFUSED = "the form's CSRF token is missing or wrong"


@dataclass
class Ui:
    page: Page
    base: str
    test_name: str
    _shots: int = field(default=0)

    def open(self, path: str, label: str = "") -> Response:
        response = self.page.goto(self.base + path)
        assert response is not None, f"no response for {path}"
        self.shot(f"{path.split('?')[0].strip('/') or 'overview'}-{label}" if label else path)
        return response

    def shot(self, label: str) -> None:
        """A full-page screenshot named by the test, its order in the test and the page."""
        self._shots += 1
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", label.split("?")[0].strip("/")) or "overview"
        self.page.screenshot(path=ARTIFACTS / f"{self.test_name}--{self._shots:02d}-{slug}.png", full_page=True)

    def login(self, key: str, next_path: str = "/") -> Response:
        """Sign in through the form; the answer of the POST (a 303 is followed, so 200 or an error page)."""
        self.open(f"/login?next={quote(next_path, safe='/')}")  # its own query stays inside `next`
        self.page.fill("form#login input[name=api_key]", key)
        return self.submit("form#login")

    def submit(self, form: str) -> Response:
        """Press the form's button and wait for the page the server answers with."""
        with self.page.expect_navigation() as navigation:
            self.page.locator(f"{form} button").first.click()
        self.shot(self.page.url.removeprefix(self.base))
        return navigation.value

    def confirm(self, form: str, answer: Literal["ok", "cancel"]) -> str:
        """Press a destructive form's button and answer the dialog that asks first; what the dialog said.
        Cancel leaves the page as it was (nothing is sent); ok sends the form and waits for the answer page."""
        self.page.locator(f"{form} button").first.click()
        dialog = self.page.locator("#confirm-dialog")
        expect(dialog).to_be_visible()
        said = self.page.locator("#confirm-text").inner_text()
        self.shot(f"confirm-{answer}")
        if answer == "cancel":
            self.page.click("#confirm-cancel")
            expect(dialog).to_be_hidden()
        else:
            with self.page.expect_navigation():
                self.page.click("#confirm-ok")
            self.shot(self.page.url.removeprefix(self.base))
        return said

    def submit_ok(self, form: str) -> None:
        """Submit a form that should work: the server redirects back to a page with the ok flash."""
        answer = self.submit(form)
        assert answer.ok and self.flash()[0] == "ok", (
            f"{form} was answered {answer.status}: {self.page.inner_text('main')[:300]!r}"
        )

    def flash(self) -> tuple[str, str]:
        """The message the last form left: its kind (ok/error) and text."""
        flash = self.page.locator("#flash")
        return flash.get_attribute("data-kind") or "", flash.inner_text()

    def csrf_token(self) -> str:
        """The session's token, from the sign-out form every page's header has."""
        return self.page.locator(f"form#logout input[name={CSRF_FIELD}]").get_attribute("value") or ""

    def form(self, selector: str) -> tuple[str, dict[str, str]]:
        """Where the form posts to (absolute) and the fields it sends but its CSRF token: what a forger can copy."""
        action, fields = self.page.locator(selector).first.evaluate(
            "f => [f.action, Object.fromEntries(new FormData(f))]"
        )
        fields.pop(CSRF_FIELD, None)
        return action, fields

    def forge_post(self, url: str, fields: dict[str, str]) -> APIResponse:
        """A POST from outside the page's own forms, carrying the session cookie and only the fields given."""
        return self.page.request.post(url, form=fields, max_redirects=0)
