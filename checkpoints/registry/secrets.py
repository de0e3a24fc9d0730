"""The secret detectors (docs/secrets.md): one declaration each, the name a finding stores and the label the
Secrets page shows, with the regular expression that finds it, in RE2's syntax.

Most are detect-secrets' own regex plugins, their patterns taken from the installed version (pinned in
pyproject.toml) so that an upgrade brings its new detectors here; detect-secrets writes them for Python's `re`, so
the few that use look-arounds are rewritten into RE2's syntax below (`_RE2_SPELLING`), and one that does not
translate is left out and named in `LEFT_OUT`. Ours follow where detect-secrets 1.5 falls short: model providers'
keys it does not know, and passwords in any URL. Every pattern runs on RE2 (linear time: no input makes one
backtrack), as do the patterns a project adds on its Secrets page, which are not declared here: they are the
project's data (`Project.secret_patterns`).

A detector that is not a regular expression, the high-entropy value under a key named like a secret, is declared
with no patterns and implemented by the scanner (`checkpoints.store.secrets`)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
from detect_secrets.plugins.base import RegexBasedDetector

from . import Registry


@dataclass(frozen=True)
class SecretDetector:
    name: str  # stored in each finding: never rename one
    label: str
    # (RE2 pattern, the group holding the value: 0 for the whole match); none for a detector the scanner implements
    patterns: tuple[tuple[str, int], ...] = ()
    origin: str = ""  # "detect-secrets" for theirs; empty for ours


SECRET_DETECTORS: Registry[SecretDetector] = Registry("secret detector")

# Keys whose value `keyword_entropy` judges: a name ending so ("github_token", "client_secret", "Authorization"),
# not one that only contains it ("tokenizer", "max_tokens", "author").
SECRET_KEY_NAMES = re.compile(
    r"(?i)(token|secret|passw(or)?d|passwd|api[_-]?key|access[_-]?key|private[_-]?key|auth|authorization|credentials?)$"
)

# detect-secrets' plugins that are no regular expression for a secret, or find what is not one: their own
# entropy and keyword scanners (ours, `keyword_entropy`, judges values under secret-like keys instead: theirs fire
# on every hash and commit id in a transcript) and public IP addresses.
_NOT_USED = {"Base64HighEntropyString", "HexHighEntropyString", "KeywordDetector", "IPPublicDetector"}

# Python-only constructs in detect-secrets' patterns and their RE2 spelling. The begin anchor of its assignment
# patterns becomes a consumed non-word character, and "not followed by one of [...]" a consumed character not in
# the class or the end: the value is in a group, so what the match starts or ends with does not matter. "Not
# followed by a word character" after a run of word characters and dashes is RE2's \b (but for a token ending in
# a dash); a bounded repeat past RE2's 1000 is clipped (longer tokens are still found, cut short).
_RE2_SPELLING = (
    (re.compile(re.escape(r"(?:(?<=\W)|(?<=^))")), r"(?:^|\\W)"),
    (re.compile(r"\(\?!\[([^\]]*)\]\)\)"), r")(?:[^\1]|$)"),  # one that ends the value's group: after it
    (re.compile(r"\(\?!\[([^\]]*)\]\)"), r"(?:[^\1]|$)"),
    (re.compile(re.escape(r"(?!\w)")), r"\\b"),
    (re.compile(re.escape(r"{50,1024}")), r"{50,1000}"),
)
# Their patterns whose one group is a token's prefix, not its value: the whole match is the value.
_WHOLE_MATCH = {"GitHubTokenDetector", "GitLabTokenDetector"}
LEFT_OUT: dict[str, str] = {}  # detect-secrets' class name → why it is not run


def _re2_spelling(pattern: str, flags: int) -> str | None:
    for python, re2 in _RE2_SPELLING:
        pattern = python.sub(re2, pattern)
    if flags & re.VERBOSE and re.search(r"[\s#]", pattern):  # verbose with nothing to strip is plain
        return None
    if "(?<" in pattern or "(?=" in pattern or "(?!" in pattern:
        return None
    return ("(?i)" if flags & re.IGNORECASE else "") + pattern


def _slug(secret_type: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", secret_type.lower()).strip("_")


def _register_detect_secrets() -> None:
    plugin: Any
    for secret_type, plugin in sorted(get_mapping_from_secret_type_to_class().items()):
        if plugin.__name__ in _NOT_USED or not issubclass(plugin, RegexBasedDetector):
            continue
        patterns = []
        denylist: Iterable[re.Pattern[str]] = plugin.denylist  # a class attribute in each plugin
        for regex in denylist:
            pattern = _re2_spelling(regex.pattern, regex.flags)
            if pattern is None:
                LEFT_OUT[plugin.__name__] = "a look-around RE2 cannot run"
                break
            patterns.append((pattern, 1 if regex.groups and plugin.__name__ not in _WHOLE_MATCH else 0))
        else:
            SECRET_DETECTORS.register(
                SecretDetector(_slug(secret_type), secret_type, tuple(patterns), "detect-secrets")
            )


_register_detect_secrets()
# What detect-secrets 1.5 does not know.
SECRET_DETECTORS.register(
    SecretDetector(
        "anthropic_key", "Anthropic API Key", ((r"\bsk-ant-(?:api|admin)[0-9]{2}-[A-Za-z0-9_\-]{20,200}", 0),)
    )
)
# OpenAI's keys since 2024 (sk-proj-, sk-svcacct-, sk-admin-): detect-secrets 1.5 knows only the older sk-…T3BlbkFJ…
SECRET_DETECTORS.register(
    SecretDetector(
        "openai_project_key", "OpenAI API Key", ((r"\bsk-(?:proj|svcacct|admin)-[A-Za-z0-9_\-]{40,300}", 0),)
    )
)
SECRET_DETECTORS.register(SecretDetector("google_api_key", "Google API Key", ((r"\bAIza[0-9A-Za-z_\-]{35}\b", 0),)))
SECRET_DETECTORS.register(
    SecretDetector("hugging_face_token", "Hugging Face Token", ((r"\bhf_[A-Za-z0-9]{34,40}\b", 0),))
)
# The password of user:password@ in any scheme's URL (postgres://, redis://, https://…): the group is the value.
SECRET_DETECTORS.register(
    SecretDetector(
        "url_password",
        "Password in URL",
        ((r"\b[A-Za-z][A-Za-z0-9+.\-]{0,30}://[^\s:/?#@\[\]]{1,256}:([^\s/?#@\[\]]{1,256})@", 1),),
    )
)
SECRET_DETECTORS.register(SecretDetector("keyword_entropy", "High-entropy value under a secret's key"))
