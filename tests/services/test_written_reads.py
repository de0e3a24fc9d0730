"""The reads every API request makes — its token with its project, a create's session with its head, the session
under ingest's lock — are statements written out (`checkpoints.models.written`): no ORM query is compiled for them,
and what they return is what the ORM returns, converters included (escaped text, JSON, dates)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.db.models.sql.compiler import SQLCompiler
from django.utils import timezone

from checkpoints.models import AgentSession, ApiToken, Project
from checkpoints.services import create_api_token, tokens
from checkpoints.services.checkpoints import locked_for_ingest, session_with_head

pytestmark = pytest.mark.django_db


@pytest.fixture
def no_compiling(monkeypatch):
    """Fails a test whose code compiles an ORM query while it is on."""
    compiled: list[str] = []
    real = SQLCompiler.as_sql

    def as_sql(self: SQLCompiler, *args: Any, **kwargs: Any) -> Any:
        compiled.append(self.query.model.__name__ if self.query.model else "?")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(SQLCompiler, "as_sql", as_sql)
    return compiled


def fields_of(instance: Any) -> dict[str, Any]:
    return {f.attname: getattr(instance, f.attname) for f in type(instance)._meta.concrete_fields}


def test_a_token_is_read_with_its_project_as_the_orm_reads_them_without_compiling_a_query(project, no_compiling):
    Project.objects.filter(pk=project.pk).update(
        secret_patterns=[{"name": "k\u00e9y", "pattern": "sk-[a-z]+"}], secrets_found_at=timezone.now()
    )
    token, secret = create_api_token(project, name="ag\ue000ent", expires_in=timedelta(days=3))
    no_compiling.clear()
    found = tokens.authenticate_token(secret, recall=False)
    assert no_compiling == []  # (its once-a-minute `last_used_at` UPDATE is no SELECT)
    orm = ApiToken.objects.select_related("project").get(pk=token.pk)
    assert found is not None
    assert fields_of(found) == fields_of(orm) and fields_of(found.project) == fields_of(orm.project)
    assert found.project.secret_patterns == [{"name": "k\u00e9y", "pattern": "sk-[a-z]+"}]
    assert found.name == "ag\ue000ent" and found.expires_at == orm.expires_at and found.last_used_at is not None


def test_revoked_expired_and_unknown_tokens_are_refused_at_once(project, no_compiling):
    token, secret = create_api_token(project, name="agent")
    assert tokens.authenticate_token(secret, recall=False) is not None
    ApiToken.objects.filter(pk=token.pk).update(revoked_at=timezone.now())
    assert tokens.authenticate_token(secret, recall=False) is None
    ApiToken.objects.filter(pk=token.pk).update(revoked_at=None, expires_at=timezone.now() - timedelta(seconds=1))
    assert tokens.authenticate_token(secret, recall=False) is None
    assert tokens.authenticate_token(secret + "x", recall=False) is None


def test_a_session_is_read_with_its_head_as_the_orm_reads_it_and_only_in_its_project(
    project, other_project, make_session, make_checkpoint, no_compiling
):
    session = make_session("run-\ue000-\x00-1")
    AgentSession.objects.filter(pk=session.pk).update(metadata={"k": "v\x00", "big": 1e300, "neg": -0.0})
    head = make_checkpoint(session, {"a": 1})
    no_compiling.clear()
    found = session_with_head(project, "run-\ue000-\x00-1")
    assert no_compiling == []
    orm = AgentSession.objects.get(pk=session.pk)
    assert found is not None and fields_of(found) == fields_of(orm)
    assert found.metadata == {"k": "v\x00", "big": 1e300, "neg": -0.0}
    assert found.head.pk == head.pk and found.head.seq == 1 and bytes(found.head.root) == bytes(head.root)
    assert found.project is project
    assert session_with_head(other_project, "run-\ue000-\x00-1") is None  # another project's session: none
    assert session_with_head(project, "run-2") is None


def test_the_session_under_ingests_lock_is_the_orms_row_with_its_heads_seq_and_calls(
    project, make_session, make_checkpoint, no_compiling
):
    session = make_session()
    assert locked_for_ingest("{table}.id = %s", [session.pk]).head_seq is None  # no head yet
    make_checkpoint(session, {"messages": [{"tool_calls": [{"name": "search", "args": {}}]}]})
    no_compiling.clear()
    found = locked_for_ingest("{table}.id = %s", [session.pk])
    assert no_compiling == []
    orm = AgentSession.objects.get(pk=session.pk)
    assert found is not None and fields_of(found) == fields_of(orm)
    assert found.head_seq == 1 and found.head_calls == orm.head.calls_made
    assert found._state.adding is False and found._state.db == connection.alias
