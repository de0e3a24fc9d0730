"""The notification channels, one module each, registered here in the order the console offers them.

Adding a channel (docs/extending-channels.md): declare its value and label in `Channel` (checkpoints/models/
outbox.py), write its module here with a `CHANNEL = ChannelKind(…)`, and register it below."""

from __future__ import annotations

from . import apprise, email, slack, webhook
from .registry import REGISTRY, ChannelKind, InvalidTarget, check_target, choices, kind_of, register, target_help

for _module in (webhook, slack, email, apprise):
    register(_module.CHANNEL)

__all__ = ["REGISTRY", "ChannelKind", "InvalidTarget", "check_target", "choices", "kind_of", "register", "target_help"]
