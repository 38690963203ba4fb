"""The system's Chromium for real-browser tests (Playwright), and the Debian packages it needs.

``make browser-deps`` (a prerequisite of ``make test``) runs ``python3 tests/browser.py
install``: when no Chromium is found (``/usr/bin/chromium``, else ``chromium`` or
``chromium-browser`` on PATH), it installs Debian's ``chromium`` (and ``fonts-liberation``,
the fonts Chromium's defaults expect, a mere recommendation of the package) with apt-get if
it runs as root, and otherwise says what to install (tests/debian_packages.py). Under
``CI=true`` a missing browser is an error: CI must run the browser tests, never skip them.
Playwright's own browser download (``playwright install``) is not used: Playwright drives
the system's Chromium by its path. The install step uses the standard library only, so it
runs before the project's virtual environment exists; Playwright is imported only by
``SystemBrowser.start()``.

``SystemBrowser`` (tests/conftest.py's ``browser`` fixture) launches it headless. Playwright's
sync API keeps its event loop marked as running in the thread that uses it, for as long as
it runs, and ``asyncio.run()`` refuses to start there; other tests of the session call it. So
between the tests that use the browser, ``pause()`` unmarks the loop (Playwright's driver
just waits) and ``resume()`` marks it again before the browser is used.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from typing import TYPE_CHECKING

from debian_packages import ensure, install_command, install_main

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Playwright

PACKAGES = ("chromium", "fonts-liberation")
DEBIAN_CHROMIUM = "/usr/bin/chromium"
# As root (containers, CI) Chromium refuses to start with its sandbox ("Running as root
# without --no-sandbox is not supported"); chromium_sandbox=False passes --no-sandbox. A
# container's /dev/shm is often 64 MB, too small for Chromium's shared memory: use /tmp.
LAUNCH_ARGS = ("--disable-dev-shm-usage",)


def executable() -> str | None:
    """The path of the system's Chromium, if any."""
    if os.access(DEBIAN_CHROMIUM, os.X_OK):
        return DEBIAN_CHROMIUM
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


def missing() -> list[str]:
    """The Debian packages whose files the browser tests need and cannot find."""
    return [] if executable() else ["chromium"]


def ensure_installed() -> str | None:
    """Install Chromium when it is missing and this runs as root; None when it is there, else
    why not (for a non-root user: the command to run as root).
    """
    return ensure("browser tests", missing, PACKAGES, "browser-deps")


class SystemBrowser:
    """Playwright and the system's Chromium, launched headless (see the module's docstring)."""

    def __init__(self, playwright: Playwright, browser: Browser,
                 loop: asyncio.AbstractEventLoop) -> None:
        self.playwright = playwright
        self.browser = browser
        self._loop = loop

    @classmethod
    def start(cls) -> SystemBrowser:
        """Start Playwright and launch the browser; the caller's thread uses them."""
        from playwright.sync_api import sync_playwright

        path = executable()
        if path is None:
            msg = (f"no Chromium; as root run: {install_command(PACKAGES)} "
                   "(or: make browser-deps)")
            raise RuntimeError(msg)
        playwright = sync_playwright().start()
        try:
            browser = playwright.chromium.launch(executable_path=path, headless=True,
                                                 chromium_sandbox=False, args=list(LAUNCH_ARGS))
        except BaseException:
            playwright.stop()
            raise
        return cls(playwright, browser, asyncio.get_running_loop())

    def pause(self) -> None:
        """Unmark Playwright's event loop as running in this thread, so that other code may
        run an event loop of its own here; ``resume()`` before using the browser again.
        """
        if asyncio._get_running_loop() is self._loop:
            asyncio._set_running_loop(None)

    def resume(self) -> None:
        """Mark Playwright's event loop as running again (its sync API needs that)."""
        if not self._loop.is_closed():
            asyncio._set_running_loop(self._loop)

    def stop(self) -> None:
        """Close the browser and stop Playwright."""
        self.resume()
        try:
            self.browser.close()
        finally:
            self.playwright.stop()


def main(argv: list[str]) -> int:
    """``install``: install what is missing (as root), else say what to install."""
    return install_main(argv, "tests/browser.py", "browser tests", ensure_installed,
                        lambda: f"Chromium is installed: {executable()}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
