"""Every console URL answers a signed-out visitor the same way, whatever the method: sign in first.

`console()` wraps each view outermost, before the method check (`require_GET`/`require_POST`), so a
signed-out POST to a page, or a signed-out GET of an action, is a login redirect back to the same URL
and never a 405 that tells a stranger which methods a view takes.
"""

from __future__ import annotations

from urllib.parse import quote

import pytest
from django.test import Client
from django.urls import URLPattern, reverse

from dashboard.urls import urlpatterns

NAMES = sorted(p.name for p in urlpatterns if isinstance(p, URLPattern) and p.name)


def _url(name: str) -> str:
    pattern = next(p for p in urlpatterns if isinstance(p, URLPattern) and p.name == name)
    return reverse(f"dashboard:{name}", args=[1] * len(pattern.pattern.converters))


@pytest.mark.django_db
@pytest.mark.parametrize("method", ["get", "post", "put", "delete"])
@pytest.mark.parametrize("name", NAMES)
def test_a_signed_out_visitor_is_sent_to_sign_in_whatever_the_method(name, method):
    url = _url(name)
    for headers in ({}, {"HX-Request": "true"}):
        response = getattr(Client(), method)(url, headers=headers)
        assert response.status_code == 302, (method, url, headers)
        assert response["Location"] == f"{reverse('login')}?next={quote(url)}"
