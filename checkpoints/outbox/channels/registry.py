"""The notification channels' registry: what the console needs of each channel, registered once by its module.

A channel is declared on the models floor (`Channel`: the value stored in rules and deliveries, and its label;
models import nothing of the outbox) and implemented by one module of this package, which builds its
`ChannelKind`; `channels/__init__.py` registers it. Everything else reads the registry: `deliveries` finds the
sender and what makes a saved target unsendable, `notifications` checks a rule's target and whether the rule gets
a signing secret, the console's rule form offers the registered channels with their target help. A test proves
every declared channel is registered, checked and documented (docs/extending-channels.md says how to add one).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

from ...audit import InvalidInput
from ...models import Channel, Delivery
from ..outcome import Outcome


class InvalidTarget(InvalidInput):
    """A rule's target cannot be sent to by its channel; the message says why, for the form."""

    def __init__(self, message: str) -> None:
        super().__init__("target", message)


def _always_sendable(target: str) -> str:
    return ""


@dataclass(frozen=True)
class ChannelKind:
    """One channel as the outbox and the console use it."""

    value: str  # stored in rules' and deliveries' `channel`: never renamed once a row holds it
    title: str  # its short name in the target field's help ("Slack")
    target_help: str  # what its target is, for that help ("the https:// URL")
    send: Callable[[Delivery], Outcome]  # one attempt; deliveries records the outcome and retries
    # Raises InvalidTarget when the channel cannot (or may not) send to a target: run when a rule is saved, in
    # the console, the admin and the service alike.
    check_target: Callable[[str], None]
    # Why a target saved earlier must no longer be sent to (rules change; the rules of what may be sent change
    # too), checked before each attempt, which then fails without retries; "": it may be sent.
    refusal_at_send: Callable[[str], str] = _always_sendable
    signed: bool = False  # signs its deliveries with the rule's secret, generated when the rule is saved
    label: str = ""  # as the console shows it; "": the label of its `Channel` choice

    def __post_init__(self) -> None:
        if not self.label:
            object.__setattr__(self, "label", Channel(self.value).label)


REGISTRY: dict[str, ChannelKind] = {}
VALUE_MAX = 20  # NotificationRule.channel's and Delivery.channel's max_length


def register(kind: ChannelKind) -> ChannelKind:
    """Make `kind` a channel rules may use; its value must be new and fit the `channel` columns."""
    if kind.value in REGISTRY:
        raise ValueError(f"The channel {kind.value!r} is registered already.")
    if not 0 < len(kind.value) <= VALUE_MAX:
        raise ValueError(f"A channel's value is 1 to {VALUE_MAX} characters: {kind.value!r}.")
    REGISTRY[kind.value] = kind
    return kind


def kind_of(value: str) -> ChannelKind | None:
    return REGISTRY.get(value)


def choices() -> list[tuple[str, str]]:
    """The channels a rule may use, as (value, label), in the order they were registered."""
    return [(kind.value, kind.label) for kind in REGISTRY.values()]


def target_help() -> str:
    """The target field's help: each channel's target, channels with the same one named together."""
    grouped = itertools.groupby(REGISTRY.values(), key=lambda kind: kind.target_help)
    return " ".join(f"{' and '.join(kind.title for kind in kinds)}: {help_text}." for help_text, kinds in grouped)


def check_target(value: str, target: str) -> None:
    """Raise InvalidTarget unless the channel `value` can send to `target`."""
    kind = kind_of(value)
    if kind is None:
        raise InvalidTarget(f"Unknown channel {value!r}.")
    kind.check_target(target)
