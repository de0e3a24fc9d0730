"""Requests generated from the API's own OpenAPI schema (schemathesis) against a live server: no input gets a
5xx, and every answer keeps to the schema (documented status codes, content type, body shape).

Each generated request is sent aimed at a session, checkpoints and a phase that exist (the paths that reach the
services and the database), and as generated (unknown ids: the 4xx paths) when its path parameters are new to the
operation's test: schemathesis's coverage phase sends ~250 bodies and queries under the same path parameters, and
a request with unknown ids answers 404 (or the 422 the aimed request with the same body and query gets) whatever
its body and query. Every body and query still reaches the server in the aimed request.
"""

from __future__ import annotations

import json

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from checkpoints import services
from checkpoints.api import api
from checkpoints.audit import Actor
from checkpoints.services.fleet import Reach, Selection, start_recovery
from checkpoints.services.targets import TargetRule

pytestmark = pytest.mark.django_db(transaction=True)

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
EXAMPLES = 25  # per operation and per aim: ~1,000 requests in all, under a minute


@pytest.fixture
def existing(project):
    """A session with two checkpoints, a fork source and a phase that the aimed requests reach."""
    session, _ = services.upsert_session(project, external_id="target", agent="agent-1")
    first, _ = services.create_checkpoint(session, services.CheckpointInput(state={"n": 1, "messages": ["a"]}))
    second, _ = services.create_checkpoint(session, services.CheckpointInput(state={"n": 2, "messages": ["a", "b"]}))
    services.create_checkpoint(session, services.CheckpointInput(state={"n": 3}, status="failed"))
    row, token = services.create_api_token(project, name="fuzz", scopes=["read", "write", "recover"])
    services.create_api_token(project, name="reader", read_only=True)
    recovery = start_recovery(
        Selection("restore", TargetRule()), Reach.for_token(row), actor=Actor.system(), reason="fuzz",
        start=lambda pk: None,
    )  # fmt: skip
    return {
        "token": token,
        "external_id": session.external_id,
        "ids": (first.pk, second.pk),
        "recovery": recovery.pk,
        "addressed": set(),
    }


# The schema the server publishes at /api/v1/openapi.json, read once to generate the tests.
schema = schemathesis.openapi.from_dict(json.loads(json.dumps(api.get_openapi_schema(), default=str)))


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_generated_requests_never_get_a_server_error_and_keep_to_the_schema(case, existing, live_server):
    headers = {"Authorization": f"Bearer {existing['token']}"}
    aimed = _aimed(case, existing)
    addressed = repr(case.path_parameters)
    as_generated = None if aimed and addressed in existing["addressed"] else case
    existing["addressed"].add(addressed)
    with requests.Session() as http:
        for sent in filter(None, (as_generated, aimed)):
            response = sent.call(base_url=live_server.url, headers=headers, session=http, timeout=30)
            sent.validate_response(response, checks=CHECKS, headers=headers)


def _aimed(case, existing):
    """The same request with its path naming things that exist; None when it has no path parameters."""
    if not case.path_parameters:
        return None
    parameters = dict(case.path_parameters)
    if "external_id" in parameters:
        parameters["external_id"] = existing["external_id"]
    for name, pk in zip(("checkpoint_id", "other_id"), existing["ids"], strict=True):
        if name in parameters:
            parameters[name] = pk
    if "number" in parameters:
        parameters["number"] = 1
    if "recovery_id" in parameters:
        parameters["recovery_id"] = existing["recovery"]
    return case.operation.Case(
        path_parameters=parameters,
        query=case.query,
        body=case.body,
        media_type=case.media_type,
        headers=case.headers,
    )
