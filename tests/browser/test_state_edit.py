"""An operator edits a value of a checkpoint's state in Chromium: from the state tree to the editor, a bad value
refused, the diff previewed, saved as the new head with Undo offered. Shot at 1280 and 390 px, light and dark."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from checkpoints import store
from checkpoints.models import AgentSession, Checkpoint, CheckpointKind
from checkpoints.services import CheckpointInput, create_checkpoint, upsert_session

from .test_tokens import shoot_everywhere

pytestmark = pytest.mark.django_db(transaction=True)


def test_operator_edits_a_value_previews_the_diff_and_saves_a_new_head(
    page, live_server, sign_in, screenshot, alice, project
):
    session, _ = upsert_session(project, external_id="planner-7", agent="planner")
    state = {
        "memory": {"goal": "delete every stale branch", "budget": 40, "notes": ["asked twice", "<b>not bold</b>"]},
        "messages": [{"role": "user", "content": "tidy the repository"}],
    }
    checkpoint, _ = create_checkpoint(session, CheckpointInput(state=state, name="plan", step=3))
    sign_in(alice, everywhere=False)
    page.goto(f"{live_server.url}/checkpoints/{checkpoint.pk}/#state")
    page.get_by_role("link", name="Edit memory").click()
    expect(page.get_by_role("heading", name="Edit the state of #1 plan")).to_be_visible()
    editor = page.get_by_label("New value (JSON)")
    expect(editor).to_have_value(
        '{\n  "budget": 40,\n  "goal": "delete every stale branch",\n  "notes": [\n    "asked twice",\n'
        '    "<b>not bold</b>"\n  ]\n}'
    )  # keys as stored: sorted
    shoot_everywhere(page, "state-edit-form")

    editor.fill('{"goal": "archive stale branches", "budget": 40')
    page.get_by_role("button", name="Preview the change").click()
    expect(page.locator("#id_value_error")).to_contain_text("Not JSON")

    page.get_by_label("New value (JSON)").fill(
        '{"goal": "archive stale branches; delete nothing", "budget": 10, "notes": ["asked twice", "<b>not bold</b>"]}'
    )
    page.get_by_role("button", name="Preview the change").click()
    expect(page.get_by_role("heading", name="What the edit changes")).to_be_visible()
    expect(page.locator("#diff-summary")).to_contain_text("2 changes")
    shoot_everywhere(page, "state-edit-preview")
    page.get_by_label("Reason").fill("the goal it inferred deletes work; archive instead")
    screenshot("state-edit", guide=True)  # the operator guide's picture (docs/images/state-edit.png)
    assert Checkpoint.objects.count() == 1

    page.get_by_label("Reason").fill("")
    page.get_by_role("button", name="Save as new head").click()
    expect(page.locator("#id_reason_error")).to_contain_text("Say why")
    page.get_by_label("Reason").fill("the goal it inferred deletes work; archive instead")
    page.get_by_role("button", name="Save as new head").click()
    expect(page.get_by_role("button", name="Undo")).to_be_visible()
    edited = Checkpoint.objects.get(kind=CheckpointKind.EDIT)
    assert AgentSession.objects.get(pk=session.pk).head_id == edited.pk
    assert store.load_state(bytes(edited.root))["memory"]["budget"] == 10
    expect(page.get_by_role("heading", name="#2 edit of #1")).to_be_visible()
    shoot_everywhere(page, "state-edit-saved")
