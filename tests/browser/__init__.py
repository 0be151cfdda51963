"""The browser tests: a package, so that their stack and chromium (package-scoped fixtures) end with them.

Playwright's sync API holds an event loop on the main thread while it is open; left open to the
end of the session, it would break every asyncio test that runs after these."""
