"""The secret scanner on what a change adds: each detector finds its kind of value, fingerprints are keyed, and no
pattern — ours or a hostile one a project adds — can stall a scan."""

from __future__ import annotations

import re
import time

import pytest

from checkpoints.registry.secrets import LEFT_OUT, SECRET_DETECTORS
from checkpoints.store import secrets

ANTHROPIC = "sk-ant-api03-" + "Qx7vL2mN9pR4sT6uW8yZ0aB3cD5eF1gH" * 3
OPENAI = "sk-proj-" + "Ab3dEx9Q_r7Tz-Kw" * 5
GOOGLE = "AIzaSyD4-fake9Kq2Lm7Np3Rs8Tu1Vw6Xy0Zab1"
HUGGING_FACE = "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"
AWS = "AKIAIOSFODNN7EXAMPLQ"
GITHUB = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
SLACK = "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
STRIPE = "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"


def found(state, **kwargs):
    return {(hit.path, hit.detector) for hit in secrets.scan([["s", [], state]], **kwargs).hits}


@pytest.mark.parametrize(
    ("value", "detector"),
    [
        (ANTHROPIC, "anthropic_key"),
        (OPENAI, "openai_project_key"),
        (GOOGLE, "google_api_key"),
        (HUGGING_FACE, "hugging_face_token"),
        (AWS, "aws_access_key"),
        (GITHUB, "github_token"),
        (SLACK, "slack_token"),
        (STRIPE, "stripe_access_key"),
        (JWT, "json_web_token"),
        ("-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\n-----END RSA PRIVATE KEY-----", "private_key"),
    ],
)
def test_each_kind_of_key_is_found_where_it_sits_in_a_tool_output(value, detector):
    state = {"messages": [{"role": "tool", "content": f"$ env\nHOME=/root\nKEY={value}\nPATH=/usr/bin"}]}
    assert (("messages", 0, "content"), detector) in found(state)


def test_a_password_in_any_urls_is_found_and_the_finding_is_the_password():
    [hit] = [
        hit
        for hit in secrets.scan(
            [["s", ["env"], "DATABASE_URL=postgresql://app:Tr0ub4dor-3@db.internal:5432/prod"]]
        ).hits
    ]
    assert hit.path == ("env",)
    assert hit.fingerprint == secrets.fingerprint("Tr0ub4dor-3")
    assert hit.length == len("Tr0ub4dor-3")


def test_a_random_value_under_a_secrets_key_is_found_and_ordinary_values_are_not():
    state = {
        "config": {
            "api_key": "Zx8Qw2Lp9Vb4Nc7Mk3Jh",
            "Authorization": "Bearer 9f8e7d6c5b4a39281706f5e4d3c2b1a0",
            "password": "password-password",  # low entropy: not judged random
            "max_tokens": 4096,
            "tokenizer": "cl100k_base_tokenizer",
            "author": "Ada Lovelace of the Analytical Engine",
        },
        "commit": "3b5669f0e3a1d2c4b6a8f0e2d4c6b8a0e2f4a6c8",  # a hash in a transcript is no secret
    }
    assert found(state) == {
        (("config", "api_key"), "keyword_entropy"),
        (("config", "Authorization"), "keyword_entropy"),
    }


def test_ordinary_agent_text_finds_nothing():
    words = "the agent read the file, ran the tests and opened a pull request for review "
    state = {"messages": [{"role": "assistant", "content": words * 50, "tool_calls": [{"name": "grep"}]}]}
    assert found(state) == set()


def test_only_what_the_operations_add_is_scanned():
    ops = [
        ["d", ["old"]],
        ["l", ["messages"], 3, 0, [{"role": "tool", "content": f"token {GITHUB}"}]],
        ["s", ["config", "region"], "eu-west-1"],
    ]
    result = secrets.scan(ops)
    assert [(hit.path, hit.detector) for hit in result.hits] == [(("messages", 3, "content"), "github_token")]
    assert result.scanned_bytes == len(f"token {GITHUB}") + len("eu-west-1")


def test_the_fingerprint_is_keyed_and_never_the_value(settings):
    first = secrets.fingerprint(GITHUB)
    assert GITHUB not in first and len(first) == 64
    settings.SECRETS_FINGERPRINT_KEY = "another key"
    assert secrets.fingerprint(GITHUB) != first  # a guess cannot be tested without the key


def test_a_pattern_that_backtracks_catastrophically_in_python_does_not_stall_a_scan():
    hostile = secrets.project_patterns((("evil", r"(a+)+$"), ("nested", r"(x+x+)+y")))
    text = "a" * 200_000 + "!" + " " + "x" * 100_000
    started = time.monotonic()
    result = secrets.scan([["s", ["blob"], text]], extra=hostile)
    assert time.monotonic() - started < 2  # Python's re takes longer than that on 30 characters of it
    assert result.hits == [] and not result.truncated


def test_a_projects_pattern_finds_its_own_kind_of_value():
    own = secrets.project_patterns((("employee-id", r"EMP-[0-9]{6}"),))
    result = secrets.scan([["s", ["note"], "ticket for EMP-004211 about payroll"]], extra=own)
    assert [(hit.detector, hit.fingerprint) for hit in result.hits] == [
        ("custom:employee-id", secrets.fingerprint("EMP-004211"))
    ]


def test_a_pattern_re2_cannot_run_is_refused():
    with pytest.raises(secrets.InvalidPattern):
        secrets.compile_pattern(r"(a)\1")  # a backreference: exponential in a backtracking engine
    with pytest.raises(secrets.InvalidPattern):
        secrets.compile_pattern(r"foo(?=bar)")


def test_the_first_scan_of_a_process_is_not_cut_short_by_compiling_the_detectors(settings):
    secrets._detectors.cache_clear()
    settings.SECRETS_SCAN_MAX_MS = 50  # compiling takes longer than that
    assert found(f"GH_TOKEN={GITHUB}") == {((), "github_token")}


def test_a_scan_stops_at_its_byte_budget_and_says_so():
    state = [f"chunk {n} " + "z" * 1000 for n in range(100)] + [f"late {GITHUB}"]
    result = secrets.scan([["s", [], state]], max_bytes=10_000)
    assert result.truncated and result.scanned_bytes <= 10_000 and result.hits == []


def test_a_scan_stops_at_its_time_budget_and_says_so():
    state = {"messages": [f"{GITHUB} {n}" for n in range(2000)]}
    result = secrets.scan([["s", [], state]], max_ms=0)
    assert result.truncated


def test_a_state_as_deep_as_the_store_allows_is_walked(settings):
    state: object = GITHUB
    for _ in range(settings.CHECKPOINT_MAX_DEPTH):
        state = [state]
    [hit] = secrets.scan([["s", [], state]]).hits
    assert len(hit.path) == settings.CHECKPOINT_MAX_DEPTH


def test_every_declared_detector_compiles_in_re2_and_detect_secrets_regex_plugins_are_run_or_named():
    for spec in SECRET_DETECTORS:
        for pattern, group in spec.patterns:
            regex = secrets.compile_pattern(pattern)
            assert group <= regex.groups
    assert LEFT_OUT == {}  # every regex plugin of the pinned version runs on RE2
    assert {"slack_token", "github_token", "gitlab_token", "json_web_token", "private_key"} <= set(
        SECRET_DETECTORS.names()
    )
    assert all(re.fullmatch(r"[a-z0-9_]+", name) for name in SECRET_DETECTORS.names())
