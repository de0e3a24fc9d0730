"""Agent text (session titles, alert messages, reviewers' comments) made safe for where a notification shows it:
it may read as written, never as a mention, a link or markup."""

from __future__ import annotations

import re
import unicodedata

SUBJECT_MAX = 200
# Control and format characters (CR, LF, NUL, bidi overrides…) and line/paragraph separators: a title shows on
# one line, and a mail header refuses line breaks.
NOT_ON_A_LINE = frozenset({"Cc", "Cf", "Zl", "Zp"})
ZERO_WIDTH_SPACE = "\u200b"
# `@all`, `@channel`, `@here`, `@name` at the start of a word (an email address's @ follows a word character) and
# Markdown's `[label](url)`: Mattermost, Rocket.Chat and Telegram read them in plain text, and have no escape
# Slack also understands. A zero-width space keeps them from matching and shows nothing.
MENTION = re.compile(r"(?<!\w)@")
LINK_LABEL_END = re.compile(r"\]\(")
DISCORD_MARKUP = re.compile(r"([\\*_~`|>\[\]()#<@:-])")  # Markdown, spoilers, quotes, mentions, masked links


def one_line(text: str, limit: int = SUBJECT_MAX) -> str:
    """`text` on one line of at most `limit` characters: control characters become spaces, runs of spaces one."""
    spaced = "".join(" " if unicodedata.category(char) in NOT_ON_A_LINE else char for char in text)
    flat = " ".join(spaced.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def quiet_mentions(text: str) -> str:
    """`text` with no word-initial @ and no `](` left to form a mention or a Markdown link."""
    return LINK_LABEL_END.sub("]" + ZERO_WIDTH_SPACE + "(", MENTION.sub("@" + ZERO_WIDTH_SPACE, text))


def slack_text(text: str) -> str:
    """Slack's mrkdwn escaping (`&`, `<`, `>`: no `<!channel>`, `<http://…|label>` or `<@U…>` can open), and
    mentions and Markdown links quietened for the Mattermost and Rocket.Chat webhooks that take the same body."""
    return quiet_mentions(text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;"))


def discord_text(text: str) -> str:
    """Discord Markdown shown as typed: every markup character escaped with a backslash."""
    return DISCORD_MARKUP.sub(r"\\\1", text)
