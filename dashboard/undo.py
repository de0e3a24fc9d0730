"""The Undo button on the notice after a restore: an offer kept in the session until a page shows it.

The restore view calls `offer_undo`; base.html takes the offers with `{% undo_offers as offers %}` and shows each
once, as a notice with its button (as Django's messages are shown once), and takes focus there.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from django.http import HttpRequest

from checkpoints.models import AgentSession

SESSION_KEY = "dashboard_undo_offers"


@dataclass(frozen=True)
class UndoOffer:
    session_id: int  # the session whose restore the button undoes (dashboard:session_undo)
    text: str


def offer_undo(request: HttpRequest, session: AgentSession, text: str) -> None:
    offers = request.session.get(SESSION_KEY, [])
    request.session[SESSION_KEY] = [*offers, asdict(UndoOffer(session.pk, text))]


def take_undo_offers(request: HttpRequest) -> list[UndoOffer]:
    """The offers not shown yet, forgotten once taken."""
    session: Any = getattr(request, "session", None)
    if session is None or SESSION_KEY not in session:
        return []
    return [UndoOffer(**offer) for offer in session.pop(SESSION_KEY)]
