"""Unknown-tool calls (and Gemini's compressions), read from the session transcript.

A call to a tool that does not exist fires no tool hook in Codex CLI or Gemini
CLI: the agent answers the model itself (``unsupported call: X`` / ``Tool "X"
not found``). The only trace is the transcript file, so the hook reads what was
appended since its previous read (a byte offset kept with the session) and
hands those calls to the guard. Gemini CLI also rewrites its history in the
transcript when it compresses the chat (a ``$set`` of fewer ``messages``),
which is how a real compression is told apart from its ``PreCompress`` event,
fired before every request. (Claude Code reports such calls in its
``PostToolBatch`` event: its transcript, which repeats tool results in
``api-request-blob`` records, is not read.)

The work per read is bounded: at most :data:`MAX_READ` new bytes (streamed:
memory holds one line at a time), lines up to :data:`MAX_LINE`, and only lines
that can hold a tool call, its result or a history rewrite are parsed. All of it
happens before the store transaction: the lock is held only to advance the
cursor over records already parsed.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import orjson

from .._canonical import digest
from .._logging import logger
from .agents import BatchEntry, Call, scrub_gemini_shell

__all__ = [
    "FIRST_TAIL",
    "MAX_LINE",
    "MAX_READ",
    "Cursor",
    "Found",
    "UnknownCall",
    "Window",
    "read_window",
    "scan",
]

FIRST_TAIL = 256 * 1024
"""A transcript seen for the first time is read from this many bytes before its end."""
MAX_READ = 32 * 1024 * 1024
"""At most this many new bytes are read per invocation (older ones are skipped)."""
MAX_LINE = 16 * 1024 * 1024
"""A longer transcript line is skipped (a call whose result alone is this large)."""
_CHUNK = 1024 * 1024
MAX_PENDING = 64
"""Tool calls remembered while their result has not been read yet (and ids already seen)."""

_DIGEST_LEN = len(digest(None))

_CODEX_UNKNOWN = re.compile(r"^unsupported call:\s*(\S+)")
_GEMINI_UNKNOWN = re.compile(r'^Tool "([^"]+)" not found')


class Found(NamedTuple):
    """What one read of the transcript found."""

    unknown: list[UnknownCall]
    compacted: bool = False
    """Gemini: the history was rewritten with fewer messages (a compression)."""
    calls: tuple[BatchEntry, ...] = ()
    """Gemini: every tool call completed since the last read, with its outcome."""
    split: int = 0
    """Gemini: how many of ``calls`` came before the compression (if ``compacted``)."""


@dataclass(frozen=True)
class UnknownCall:
    """A call of a tool that does not exist, and the error the agent answered with."""

    tool: str
    params: Any
    call_id: str | None
    error: str


class Cursor:
    """Where reading stopped in one transcript, calls still waiting for a result,
    the ids of results already read, and (Gemini) the number of messages."""

    __slots__ = ("messages", "offset", "path", "pending", "seen")

    def __init__(
        self,
        path: str,
        offset: int | None,
        pending: dict[str, list[Any]],
        seen: list[str] | None = None,
        messages: int = 0,
    ) -> None:
        self.path = path
        self.offset = offset
        self.pending = pending
        self.seen = seen if seen is not None else []
        self.messages = messages

    @classmethod
    def load(cls, data: Any, path: str) -> Cursor:
        if isinstance(data, dict) and data.get("p") == path:
            offset = data.get("o")
            pending = data.get("u")
            seen = data.get("s")
            messages = data.get("m")
            return cls(
                path,
                offset if isinstance(offset, int) and offset >= 0 else None,
                _digested(pending),
                [x for x in seen if isinstance(x, str)] if isinstance(seen, list) else [],
                messages if isinstance(messages, int) and messages >= 0 else 0,
            )
        return cls(path, None, {})

    def dump(self) -> dict[str, Any]:
        data: dict[str, Any] = {"p": self.path, "o": self.offset, "u": self.pending}
        if self.seen:
            data["s"] = self.seen
        if self.messages:
            data["m"] = self.messages
        return data

    def first_time(self, key: str) -> bool:
        """True the first time ``key`` (a result or message id) is seen; remembers it."""
        if key in self.seen:
            return False
        self.seen.append(key)
        if len(self.seen) > MAX_PENDING:
            del self.seen[0]
        return True

    def remember(self, call_id: str, tool: str, params: Any) -> None:
        """Keep a call until its result is read: its tool and the digest of its
        arguments, never the arguments themselves (they may hold secrets)."""
        self.remember_digest(call_id, tool, digest(params))

    def remember_digest(self, call_id: str, tool: str, args_digest: str) -> None:
        """:meth:`remember` with the digest of the arguments already taken."""
        self.pending.pop(call_id, None)
        self.pending[call_id] = [tool, args_digest]
        while len(self.pending) > MAX_PENDING:
            del self.pending[next(iter(self.pending))]


def _digested(pending: Any) -> dict[str, list[Any]]:
    """Pending calls as kept now; a record written by an older loopwarden (which kept
    the raw arguments) is reduced to digests."""
    if not isinstance(pending, dict):
        return {}
    kept: dict[str, list[Any]] = {}
    for call_id, entry in pending.items():
        if isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str):
            tool, args = entry
            if not (isinstance(args, str) and len(args) == _DIGEST_LEN):
                args = digest(args)
            kept[call_id] = [tool, args]
    return kept


def stand_in(args_digest: str) -> dict[str, str]:
    """The params an unknown call read from a transcript is checked with: only the
    digest of its arguments is kept, and identical arguments give identical digests."""
    return {"argsDigest": args_digest}


# What one transcript line says, parsed outside the store transaction (see read_window):
#   Codex:  ("call", call id, tool, digest of the arguments) | ("output", call id, text)
#   Gemini: ("header",) | ("set", number of messages) | ("message", kind, id, calls)
# with calls a tuple of (call id, tool, arguments, outcome, missing).
Record = tuple[Any, ...]


class Line(NamedTuple):
    start: int
    """File offset where the line starts."""
    end: int
    """File offset after its newline."""
    record: Record


class Window(NamedTuple):
    """The new lines of a transcript, read and parsed outside any store transaction."""

    start: int
    """File offset where reading began (the rest of a line cut there was skipped)."""
    aimed: int
    """Where reading was to begin, before it was moved back to the start of its line."""
    lines: tuple[Line, ...]
    """The lines that matter, in file order."""
    end: int
    """File offset after the last complete line read (``start`` when there was none)."""
    size: int
    """The file's size when it was read."""


def _window_start(offset: int | None, size: int) -> int:
    start = offset
    if start is None or start > size:
        start = max(0, size - FIRST_TAIL)
    if size - start > MAX_READ:
        start = size - MAX_READ
    return start


def read_window(path: str, offset: int | None, fmt: Literal["codex", "gemini"]) -> Window | None:
    """Read and parse what follows ``offset`` in ``path``: at most :data:`MAX_READ` bytes
    (the newest, when more was appended), streamed, so that memory holds one line at a
    time plus what the lines that matter say. A line longer than :data:`MAX_LINE` is
    skipped (with a warning).

    Only a regular file is read, opened non-blocking: a FIFO, a device or a socket
    named as the transcript must never make a hook wait (the hook runs before the
    store transaction, so a wait here stalls this call alone). None when unreadable.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return None
    parse = _parse_codex if fmt == "codex" else _parse_gemini
    markers = _CODEX_MARKERS if fmt == "codex" else _GEMINI_MARKERS
    lines: list[Line] = []
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            logger.warning(
                "loopwarden hook: the transcript %s is not a regular file; not read", path
            )
            return None
        size = st.st_size
        start = aimed = _window_start(offset, size)
        if start > 0 and start != offset:  # jumped, maybe into the middle of a line
            start = _line_start(fd, start)
        pieces: list[bytes] = []  # of the line being read
        held = 0
        skipping = start > 0 and start != offset and os.pread(fd, 1, start - 1) != b"\n"
        line_start = done = start
        pos = start
        while pos < size:
            chunk = os.pread(fd, min(_CHUNK, size - pos), pos)
            if not chunk:
                break
            at = 0
            while True:
                newline = chunk.find(b"\n", at)
                if newline < 0:
                    if not skipping:
                        pieces.append(chunk[at:])
                        held += len(chunk) - at
                        if held > MAX_LINE:
                            logger.warning(
                                "loopwarden hook: a line of more than %d bytes in the "
                                "transcript %s is skipped",
                                MAX_LINE,
                                path,
                            )
                            pieces, held, skipping = [], 0, True
                    break
                line_end = pos + newline + 1
                if not skipping:
                    text = b"".join([*pieces, chunk[at:newline]]) if pieces else chunk[at:newline]
                    if any(marker in text for marker in markers):
                        record = parse(text)
                        if record is not None:
                            lines.append(Line(line_start, line_end, record))
                pieces, held, skipping = [], 0, False
                line_start = done = line_end
                at = newline + 1
            pos += len(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    return Window(start, aimed, tuple(lines), done, size)


def _line_start(fd: int, pos: int) -> int:
    """The start of the line that ``pos`` falls in, looked for at most :data:`MAX_LINE`
    bytes back (``pos`` itself when it is not found there)."""
    end = pos
    while pos - end < MAX_LINE and end > 0:
        begin = max(0, end - _CHUNK, pos - MAX_LINE)
        chunk = os.pread(fd, end - begin, begin)
        newline = chunk.rfind(b"\n")
        if newline >= 0:
            return begin + newline + 1
        if begin == 0:
            return 0
        end = begin
    return pos


def _take(window: Window, cursor: Cursor) -> list[Record]:
    """The records of ``window``'s lines after the cursor (as it is now); advances it.

    The window was read with the offset seen before the transaction; another hook of
    the session may have read on since: only what is still new is taken.
    """
    start = _window_start(cursor.offset, window.size)
    start = window.start if start == window.aimed else max(start, window.start)
    if window.end <= start:  # no complete line yet; keep the offset
        cursor.offset = start
        return []
    cursor.offset = window.end
    # Line starts are real ones: a cut line (start in its middle) is left out.
    return [line.record for line in window.lines if line.start >= start]


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            block["text"]
            for block in content
            if isinstance(block, dict) and isinstance(block.get("text"), str)
        )
    return ""


def _object(text: bytes) -> dict[str, Any] | None:
    try:
        obj = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) else None


_CODEX_MARKERS = (b'"function_call',)
# Only the start of an output matters (the "unsupported call: X" answer).
_OUTPUT_KEPT = 4096


def _parse_codex(text: bytes) -> Record | None:
    obj = _object(text)
    payload = obj.get("payload") if obj is not None else None
    if not isinstance(payload, dict):
        return None
    kind = payload.get("type")
    call_id = payload.get("call_id")
    if not isinstance(call_id, str):
        return None
    if kind == "function_call":
        arguments = payload.get("arguments")
        if isinstance(arguments, str):
            with contextlib.suppress(orjson.JSONDecodeError):
                arguments = orjson.loads(arguments)
        return ("call", call_id, str(payload.get("name", "")), digest(arguments))
    if kind == "function_call_output":
        return ("output", call_id, _text_of(payload.get("output")).strip()[:_OUTPUT_KEPT])
    return None


def _codex(records: list[Record], cursor: Cursor) -> list[UnknownCall]:
    found: list[UnknownCall] = []
    for record in records:
        if record[0] == "call":
            _, call_id, tool, args_digest = record
            cursor.remember_digest(call_id, tool, args_digest)
            continue
        _, call_id, text = record
        call = cursor.pending.pop(call_id, None)
        match = _CODEX_UNKNOWN.match(text)
        if match is None:
            continue
        name = match.group(1)
        if call and call[0]:
            tool, params = call[0], stand_in(call[1])
        else:
            tool, params = name, stand_in(digest({}))
        found.append(UnknownCall(tool, params, call_id, f"unsupported call: {name}"))
    return found


def _gemini_outcome(call: dict[str, Any]) -> tuple[dict[str, Any], bool] | None:
    """A completed Gemini call's outcome as the model got it (its functionResponse), and
    whether the tool does not exist; None while it has no result."""
    result = call.get("result")
    if not isinstance(result, list):
        return None
    for part in result:
        response = part.get("functionResponse") if isinstance(part, dict) else None
        answer = response.get("response") if isinstance(response, dict) else None
        if not isinstance(answer, dict):
            continue
        error = answer.get("error")
        if isinstance(error, str) and error:
            return {"error": error}, _GEMINI_UNKNOWN.match(error) is not None
        if call.get("name") == "run_shell_command":
            answer = scrub_gemini_shell(answer)
        return {"result": answer}, False
    return None


_GEMINI_MARKERS = (
    b'"toolCalls"',
    b'"messages"',
    b'"type":"user"',
    b'"type":"gemini"',
    b'"startTime"',
)


def _parse_gemini(text: bytes) -> Record | None:
    """One record of Gemini's JSONL session, reduced to what :func:`_gemini` needs (a
    user message with a large result keeps only its id)."""
    obj = _object(text)
    if obj is None:
        return None
    if "startTime" in obj and "type" not in obj:
        return ("header",)  # a session header: the CLI (re)starts, e.g. on --resume
    update = obj.get("$set")
    if isinstance(update, dict):
        messages = update.get("messages")
        return ("set", len(messages)) if isinstance(messages, list) else None
    kind = obj.get("type")
    if kind not in ("user", "gemini"):
        return None
    message_id = obj.get("id")
    calls: list[tuple[str, str, Any, dict[str, Any], bool]] = []
    found = obj.get("toolCalls")
    if kind == "gemini" and isinstance(found, list):
        for call in found:
            if not isinstance(call, dict) or not isinstance(call.get("id"), str):
                continue
            outcome = _gemini_outcome(call)
            if outcome is not None:
                name = str(call.get("name") or "")
                calls.append((call["id"], name, call.get("args", {}), *outcome))
    return ("message", kind, message_id if isinstance(message_id, str) else None, tuple(calls))


def _gemini(records: list[Record], cursor: Cursor) -> Found:
    """Gemini CLI's JSONL session: ``gemini`` records carry the completed tool calls
    (each record is written again as calls complete: ids are read once), and a
    ``$set`` of ``messages`` rewrites the history (fewer messages: a compression)."""
    calls: list[BatchEntry] = []
    compacted = False
    split = 0
    for record in records:
        if record[0] == "header":
            cursor.messages = 0
            continue
        if record[0] == "set":
            count = record[1]
            if cursor.messages and count < cursor.messages:
                compacted = True
                split = len(calls)
            cursor.messages = count
            continue
        _, _, message_id, found = record
        if message_id is not None and cursor.first_time(f"m:{message_id}"):
            cursor.messages += 1
        for call_id, name, args, outcome, missing in found:
            if cursor.first_time(call_id):
                calls.append(BatchEntry(Call(name, args, call_id), outcome, missing))
    return Found([], compacted, tuple(calls), split)


def scan(fmt: Literal["codex", "gemini"], cursor: Cursor, window: Window | None) -> Found:
    """Unknown-tool calls appended to the transcript since ``cursor`` (which advances),
    taken from ``window`` (:func:`read_window`, read before the store transaction).

    A Gemini transcript seen for the first time is read from its end: its calls
    are all outcomes, and a session loopwarden lost track of (its state expired)
    must not have its old calls counted again.
    """
    if window is None:
        return Found([])
    if fmt == "gemini" and cursor.offset is None:
        cursor.offset = window.end
        return Found([])
    records = _take(window, cursor)
    if not records:
        return Found([])
    if fmt == "gemini":
        return _gemini(records, cursor)
    return Found(_codex(records, cursor))
