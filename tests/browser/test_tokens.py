"""An operator creates an API token on the project's Tokens page in Chromium: shown once with copy buttons and
the code that uses it, gone on the next visit, then revoked after the confirmation page. Shot at 1280 and 390 px,
light and dark."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from checkpoints.models import ApiToken
from checkpoints.services import create_api_token

from .conftest import SCREENSHOTS

pytestmark = pytest.mark.django_db(transaction=True)


def shoot_everywhere(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        for width, height in ((1280, 800), (390, 844)):
            page.set_viewport_size({"width": width, "height": height})
            page.screenshot(path=str(SCREENSHOTS / f"{name}-{width}-{scheme}.png"), full_page=True)
    page.emulate_media(color_scheme="light")
    page.set_viewport_size({"width": 1366, "height": 860})


def test_operator_creates_a_token_sees_it_once_and_revokes_it(page, live_server, sign_in, alice, project):
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server.url)
    sign_in(alice, everywhere=False)
    page.get_by_role("navigation", name="Main").get_by_role("link", name="API tokens").click()
    expect(page.get_by_role("heading", name="API tokens of acme")).to_be_visible()
    shoot_everywhere(page, "tokens-empty")

    page.get_by_label("Name").fill("agent-7")
    page.get_by_label("Read only").check()
    page.get_by_label("Expires", exact=True).select_option("date")
    page.get_by_label("Expiry date").fill("2020-01-01")
    page.get_by_role("button", name="Create the token").click()
    expect(page.locator("#token-form")).to_contain_text("not in the future")
    assert not ApiToken.objects.exists()

    page.get_by_label("Expires", exact=True).select_option("30")
    page.get_by_role("button", name="Create the token").click()
    shown = page.locator("#new-token")
    expect(shown).to_have_text(re.compile(r"^cpk_[0-9a-f]{8}_\S{40,}$"))
    secret = shown.text_content()
    expect(page.locator("#snippet-client")).to_contain_text(f'CheckpointClient("{live_server.url}", "{secret}")')
    expect(page.locator("#snippet-saver")).to_contain_text(f'ConsoleSaver("{live_server.url}", "{secret}")')
    expect(page.get_by_role("button", name="Copy the token")).to_be_visible()
    copy = page.locator("button[data-copy=new-token]")  # its name reads "Copied the token" for two seconds
    copy.click()
    expect(copy).to_contain_text("Copied")
    expect(page.locator("#live-notice")).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == secret
    shoot_everywhere(page, "tokens-created")

    page.goto(f"{live_server.url}/projects/acme/tokens/")
    expect(page.get_by_role("row", name=re.compile("agent-7"))).to_contain_text("read only")
    assert secret not in page.content() and page.locator("#new-token").count() == 0

    page.get_by_role("link", name="Revoke… agent-7").click()
    expect(page.get_by_role("heading", name="Revoke the token agent-7?")).to_be_visible()
    shoot_everywhere(page, "token-revoke")
    page.get_by_role("button", name="Revoke the token").click()
    expect(page.get_by_role("row", name=re.compile("agent-7"))).to_contain_text("revoked")
    assert ApiToken.objects.get().revoked_at is not None


def test_a_viewer_sees_the_tokens_without_the_form(page, live_server, sign_in, bob, project):
    create_api_token(project, name="ci-reader", read_only=True)
    sign_in(bob, everywhere=False)
    page.goto(f"{live_server.url}/projects/acme/tokens/")
    expect(page.get_by_role("row", name=re.compile("ci-reader"))).to_be_visible()
    expect(page.locator("#token-form")).to_have_count(0)
    shoot_everywhere(page, "tokens-viewer")
