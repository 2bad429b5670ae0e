"""OpenClaw's own tools: which calls are polls and which results are message sends.

:func:`loopwarden.hashing.hash_outcome` reads these sets: a poll's outcome is its
status and output, a send's its ``details`` without per-message ids.
"""

from __future__ import annotations

__all__ = ["DELIVERY_MARKERS", "POLL_ACTIONS", "SEND_ACTIONS", "SEND_TOOLS", "VOLATILE_SEND_KEYS"]

POLL_ACTIONS = frozenset({"poll", "log"})
"""``process`` actions that poll a background process."""
SEND_ACTIONS = frozenset(
    {
        "send",
        "broadcast",
        "reply",
        "thread-reply",
        "sendWithEffect",
        "sendAttachment",
        "upload-file",
        "sticker",
        "poll",
    }
)
"""``message`` actions that send."""
SEND_TOOLS = frozenset({"sessions_send", "conversations_send", "conversations_turn"})

# Per-message ids and delivery times that channels return with every send
# (OpenClaw issue #89090: one volatile messageId made every send look new, so a
# stuck send loop could never be blocked). Route and conversation ids are not
# here on purpose: a send to another conversation is progress.
VOLATILE_SEND_KEYS = frozenset(
    {
        "messageId",
        "message_id",
        "messageIds",
        "platformMessageId",
        "platformMessageIds",
        "fileId",
        "file_id",
        "fileKey",
        "pollId",
        "poll_id",
        "receipt",
        "runId",
        "idempotencyKey",
        "ts",
        "timestamp",
        "sentAt",
        "deliveredAt",
        "createdAt",
    }
)
DELIVERY_MARKERS = ("direction", "senderId", "accountId")
"""Keys that mark a mapping as a delivered message (its ``id`` is then per message)."""
