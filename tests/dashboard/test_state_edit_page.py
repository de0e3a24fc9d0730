"""The console's state editor: an operator sets a value of a checkpoint's state, sees the diff, saves a new head."""

from __future__ import annotations

import json

import pytest
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse

from checkpoints import store
from checkpoints.models import AgentSession, AuditEvent, Checkpoint, CheckpointKind
from checkpoints.services import langgraph as lg
from tests.helpers import select, text
from tests.kits.langgraph_kit import lg_id, put_body, shell_command

XSS = '<script>alert("x")</script><img src=x onerror=alert(1)>'


@pytest.fixture
def run(make_session, make_checkpoint):
    session = make_session()
    made = [make_checkpoint(session, {"memory": {"goal": "ship it", "n": i}, "log": ["a"]}) for i in range(3)]
    session.refresh_from_db()
    return session, made


def edit_url(checkpoint: Checkpoint, query: str = "") -> str:
    return reverse("dashboard:checkpoint_edit", args=[checkpoint.pk]) + query


def form(path: str, value: str, reason: str = "wrong goal", action: str = "save") -> dict[str, str]:
    return {"path": path, "value": value, "reason": reason, "action": action}


def stored() -> tuple[int, int]:
    return Checkpoint.objects.count(), AuditEvent.objects.count()


def test_the_editor_opens_on_the_value_at_a_path(client, alice, run):
    _, made = run
    client.force_login(alice)
    page = client.get(edit_url(made[1], "?path=/memory"))
    assert page.status_code == 200
    [value] = select(page, "textarea[name=value]")
    assert json.loads(value.text) == {"goal": "ship it", "n": 1}
    assert [text(a) for a in select(page, ".state-edit-keys a")] == ["log", "memory"]  # as stored: keys sorted


def test_a_path_naming_nothing_yet_opens_an_empty_editor_saying_so(client, alice, run):
    _, made = run
    client.force_login(alice)
    page = client.get(edit_url(made[1], "?path=/memory/new"))
    assert select(page, "textarea[name=value]")[0].text in (None, "", "\n")
    assert "Nothing is stored at this path yet" in page.content.decode()


def test_preview_shows_the_diff_and_stores_nothing(client, alice, run):
    _, made = run
    client.force_login(alice)
    before = stored()
    page = client.post(edit_url(made[1]), form("/memory/goal", '"fix it"', reason="", action="preview"))
    assert page.status_code == 200 and stored() == before
    [summary] = select(page, ".state-edit-preview #diff-summary")
    assert "1 change" in text(summary)
    assert [text(path) for path in select(page, ".state-edit-preview .diff-path")] == ["memory.goal"]


def test_save_stores_a_new_head_and_offers_undo(client, alice, run):
    session, made = run
    client.force_login(alice)
    response = client.post(edit_url(made[1]), form("/memory/goal", '"fix it"'))
    edited = Checkpoint.objects.get(kind=CheckpointKind.EDIT)
    assert response.status_code == 302 and response["Location"] == reverse(
        "dashboard:checkpoint_detail", args=[edited.pk]
    )
    assert AgentSession.objects.get(pk=session.pk).head_id == edited.pk
    assert store.load_state(bytes(edited.root)) == {"memory": {"goal": "fix it", "n": 1}, "log": ["a"]}
    assert AuditEvent.objects.get(action="edit_state").actor == "alice"
    page = client.get(response["Location"])
    assert select(page, f"form[action='{reverse('dashboard:session_undo', args=[session.pk])}']")
    assert "An operator's edit of #2 (wrong goal): its state with /memory/goal set" in text(select(page, ".related")[0])
    undo = client.post(reverse("dashboard:session_undo", args=[session.pk]))
    assert undo.status_code == 302
    said = [str(message) for message in get_messages(undo.wsgi_request)]
    assert said == [
        f"Edit #{edited.seq} undone: the agent resumes from new checkpoint #5 with the state of #3, as before the edit."
    ]
    assert AgentSession.objects.get(pk=session.pk).head.parent_id == made[2].pk


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        (form("/memory/goal", "{not json"), "value", "Not JSON"),
        (form("/memory/goal", "NaN"), "value", "Not JSON"),
        (form("/memory/goal", '"x"', reason=""), "reason", "Say why"),
        (form("/memory/goal", '"ship it"'), None, "changes nothing"),
        (form("/nowhere/deeper", "1"), "path", "names no place"),
        (form("memory", "1"), "path", "not a JSON pointer"),
    ],
)
def test_bad_edits_are_form_errors_and_store_nothing(client, alice, run, data, field, message):
    _, made = run
    client.force_login(alice)
    before = stored()
    page = client.post(edit_url(made[1]), data)
    assert page.status_code == 200 and stored() == before
    where = f"#id_{field} ~ .errorlist" if field else ".notice-error"
    assert message in " ".join(text(node) for node in select(page, where))


def test_edited_values_are_escaped_in_the_preview_and_on_the_checkpoint_page(client, alice, run):
    _, made = run
    client.force_login(alice)
    page = client.post(edit_url(made[1]), form("/memory/goal", json.dumps(XSS), action="preview"))
    assert "<script>alert" not in page.content.decode() and "<img src=x" not in page.content.decode()
    response = client.post(edit_url(made[1]), form("/memory/<img src=x onerror=alert(2)>", json.dumps(XSS), reason=XSS))
    detail = client.get(response["Location"]).content.decode()
    assert "<script>alert" not in detail and "<img src=x" not in detail
    assert "&lt;script&gt;" in detail and "&lt;img src=x onerror=alert(2)&gt;" in detail


def test_a_viewer_gets_403_and_stores_nothing(client, bob, run):
    _, made = run
    client.force_login(bob)
    before = stored()
    assert client.get(edit_url(made[1])).status_code == 403
    assert client.post(edit_url(made[1]), form("/memory/goal", '"mine"')).status_code == 403
    assert stored() == before
    assert not select(client.get(reverse("dashboard:checkpoint_detail", args=[made[1].pk])), "a.t-edit")


def test_another_projects_checkpoint_is_404(client, alice, make_session, make_checkpoint, other_project):
    theirs = make_session("theirs", in_project=other_project)
    checkpoint = make_checkpoint(theirs, {"n": 1})
    client.force_login(alice)
    before = stored()
    assert client.get(edit_url(checkpoint)).status_code == 404
    assert client.post(edit_url(checkpoint), form("/n", "2")).status_code == 404
    assert client.get(reverse("dashboard:checkpoint_edit", args=[2**63 - 1])).status_code == 404
    assert stored() == before


def test_a_post_without_the_csrf_token_is_refused(alice, run):
    _, made = run
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    before = stored()
    assert client.post(edit_url(made[1]), form("/memory/goal", '"x"')).status_code == 403
    assert stored() == before


def test_the_checkpoint_page_links_each_top_level_key_to_the_editor(client, alice, run):
    _, made = run
    client.force_login(alice)
    page = client.get(reverse("dashboard:checkpoint_detail", args=[made[1].pk]))
    links = [link.get("href") for link in select(page, "a.t-edit")]
    assert links == [edit_url(made[1], "?path=/log"), edit_url(made[1], "?path=/memory")]
    assert [text(a) for a in select(page, ".cp-head-actions a[href$='/edit/']")] == ["Edit state"]


# ---- LangGraph threads -----------------------------------------------------------------------------------


def test_a_langgraph_edit_naming_a_refused_type_is_a_form_error(client, alice, project, tmp_path):
    lg.put_checkpoint(project, lg.PutInput(**put_body("thread-1", 0)))
    checkpoint = Checkpoint.objects.get()
    client.force_login(alice)
    before = stored()
    value = json.dumps(shell_command(str(tmp_path / "ran")))
    page = client.post(edit_url(checkpoint), form("/messages/0", value))
    assert page.status_code == 200 and stored() == before
    assert "does not allow" in " ".join(text(node) for node in select(page, "#id_value ~ .errorlist"))
    assert "update_state" in text(select(page, ".notice-info")[0])


def test_a_subgraph_checkpoint_offers_no_editor_and_says_which_to_edit(client, alice, project):
    lg.put_checkpoint(project, lg.PutInput(**put_body("thread-1", 0)))
    metadata = {"source": "loop", "step": 0, "parents": {"": lg_id(0)}}
    sub, _ = lg.put_checkpoint(project, lg.PutInput(**put_body("thread-1", 1, ns="work:t1", metadata=metadata)))
    client.force_login(alice)
    before = stored()
    page = client.get(edit_url(sub))
    assert not select(page, "textarea") and "so edit #1" in text(select(page, ".notice-error")[0])
    assert client.post(edit_url(sub), form("/messages/0", '"x"')).status_code == 200
    assert stored() == before
    assert not select(client.get(reverse("dashboard:checkpoint_detail", args=[sub.pk])), "a.t-edit")
