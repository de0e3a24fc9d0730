"""Browser tests: Playwright driving Debian's Chromium against live_server.

Chromium comes from the distribution (`apt-get install chromium`, done by .ci/run); Playwright's own
browser download cannot work on machines without internet. With SCREENSHOTS=1, screenshots land in
test-results/screenshots/ (an ordinary run takes none).

The operator guide's pictures (docs/images/) are shots these tests take with `screenshot(name, guide=True)`:
`UPDATE_SCREENSHOTS=1 make test-browser` (or pytest tests/browser) writes them into docs/images/; without it they
only go to test-results/screenshots/guide/, so an ordinary run never changes the work tree.
"""

from __future__ import annotations

import io
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from playwright.sync_api import Page

CHROMIUM = os.environ.get("CHROMIUM_PATH") or shutil.which("chromium") or "/usr/bin/chromium"
ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "test-results" / "screenshots"
GUIDE_IMAGES = ROOT / "docs" / "images"
UPDATE_SCREENSHOTS = os.environ.get("UPDATE_SCREENSHOTS") == "1"
# Full-page shots are for people to look at, not for the assertions: a sixth of the browser tests' time, so an
# ordinary run (CI) skips them; SCREENSHOTS=1 takes them.
TAKE_SCREENSHOTS = UPDATE_SCREENSHOTS or os.environ.get("SCREENSHOTS") == "1"
GUIDE_HEIGHT = 800  # a laptop's window: the guide shows what an operator sees first, not a page 9,000 px long
TEST_TOOLS = "/__browser-tests__"  # URLs Playwright answers with the tests' own tools (axe-core), never the console


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/browser/" in str(item.fspath):
            item.add_marker(pytest.mark.browser)


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict[str, Any]) -> dict[str, Any]:
    return {
        **browser_type_launch_args,
        "executable_path": CHROMIUM,
        "args": [
            "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--disable-quic", "--no-first-run",
        ],
    }  # fmt: skip


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args: dict[str, Any]) -> dict[str, Any]:
    return {**browser_context_args, "viewport": {"width": 1366, "height": 860}}


CSP_LISTENER = """
document.addEventListener("securitypolicyviolation", (e) => window.reportCspViolation(
  `${e.violatedDirective} blocked ${e.blockedURI || "inline"} at ${e.sourceFile}:${e.lineNumber} ${e.sample}` +
  (e.target && e.target.outerHTML ? ` on ${e.target.outerHTML.slice(0, 160)}` : "")));
"""


@pytest.fixture(autouse=True)
def csp_violations(request: pytest.FixtureRequest) -> Iterator[list[str]]:
    """Every browser test fails on a Content-Security-Policy violation in any page it visits."""
    if "page" not in request.fixturenames:
        yield []
        return
    page = request.getfixturevalue("page")
    found: list[str] = []
    page.expose_function("reportCspViolation", lambda violation: found.append(violation))
    page.add_init_script(CSP_LISTENER)
    yield found
    assert the_consoles(found) == [], f"Content-Security-Policy violations: {the_consoles(found)}"


def the_consoles(reports: list[str]) -> list[str]:
    """What the browser reported, but for what the tests' own tools did (axe-core tries an inline <style>, rightly
    blocked): that is not the console's."""
    return [report for report in reports if f"{TEST_TOOLS}/" not in report]


@pytest.fixture
def console_errors(page) -> list[str]:
    """What the browser reports as an error while a test runs: console errors, page errors, failed requests and
    answers of 400 or more."""
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(str(error)))
    # a request the next navigation cancelled (Chromium's favicon fetch, say) is not an error of the page
    page.on(
        "requestfailed",
        lambda request: (
            errors.append(f"{request.url} failed: {request.failure}") if request.failure != "net::ERR_ABORTED" else None
        ),
    )
    page.on(
        "response",
        lambda response: errors.append(f"{response.url} {response.status}") if response.status >= 400 else None,
    )
    return errors


@pytest.fixture
def root(django_user_model):
    """Staff with every permission: sees every console page and the admin."""
    return django_user_model.objects.create_superuser("root", password="root-password-1")


@pytest.fixture
def screenshot(page):
    """Save a full-page screenshot under test-results/screenshots/<name>.png when SCREENSHOTS=1 (look at them).

    `guide=True` also shoots the window at `width` (1280 unless told; 390 for a phone) for the operator guide:
    into test-results/screenshots/guide/, and into docs/images/ when UPDATE_SCREENSHOTS=1."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    def take(name: str, *, guide: bool = False, width: int = 1280) -> Path:
        path = SCREENSHOTS / f"{name}.png"
        if not TAKE_SCREENSHOTS:
            return path
        page.screenshot(path=str(path), full_page=True)
        if guide:
            guide_shot(page, name, width)
        return path

    return take


def guide_shot(page: Page, name: str, width: int) -> Path:
    """The window at `width` px, as a 256-colour PNG (text and flat colours lose nothing a reader notices)."""
    folder = GUIDE_IMAGES if UPDATE_SCREENSHOTS else SCREENSHOTS / "guide"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    viewport = page.viewport_size
    page.set_viewport_size({"width": width, "height": GUIDE_HEIGHT})
    page.evaluate("window.scrollTo(0, 0)")  # scrolled, the sticky top bar would be drawn over the page
    shot = page.screenshot()
    if viewport:
        page.set_viewport_size(viewport)
    with Image.open(io.BytesIO(shot)) as image:
        small = image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
        small.save(path, optimize=True)
    return path


@pytest.fixture
def sign_in(page, live_server):
    """Sign in through the real form as a user created by a fixture (password: <username>-password-1).

    Browser tests browse the demo projects: unless `everywhere` is off, the user first gets the roles they
    hold (alice operator, bob viewer, carol approver) in every project that exists by then."""

    def sign(user, *, everywhere: bool = True) -> None:
        if everywhere:
            _hold_roles_everywhere(user)
        page.goto(f"{live_server.url}/accounts/login/")
        page.get_by_label("Username").fill(user.username)
        page.get_by_label("Password").fill(f"{user.username}-password-1")
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(f"{live_server.url}/")

    return sign


def _hold_roles_everywhere(user) -> None:
    from checkpoints.models import Project, ProjectMembership

    roles = set(ProjectMembership.objects.filter(user=user).values_list("role", flat=True))
    ProjectMembership.objects.bulk_create(
        [
            ProjectMembership(user=user, project=project, role=role)
            for project in Project.objects.all()
            for role in roles
        ],
        ignore_conflicts=True,
    )


@pytest.fixture
def looks(page, screenshot):
    """Shoot the page at the default width, at a 1024 px laptop width, and in dark mode."""

    def shoot(name: str) -> None:
        screenshot(name)
        page.set_viewport_size({"width": 1024, "height": 768})
        screenshot(f"{name}-1024")
        page.emulate_media(color_scheme="dark")
        screenshot(f"{name}-dark")
        page.emulate_media(color_scheme="light")
        page.set_viewport_size({"width": 1366, "height": 860})

    return shoot


@pytest.fixture
def widths(page, screenshot):
    """Shoot the page at 1280 px and at a 390 px phone width (`full=False`: only what the window shows)."""

    def shoot(name: str, *, full: bool = True) -> None:
        for width, height in ((1280, 800), (390, 844)):
            page.set_viewport_size({"width": width, "height": height})
            if full:
                screenshot(f"{name}-{width}")
            else:
                SCREENSHOTS.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(SCREENSHOTS / f"{name}-{width}.png"))
        page.set_viewport_size({"width": 1366, "height": 860})

    return shoot
