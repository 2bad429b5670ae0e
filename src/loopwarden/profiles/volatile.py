"""The volatile-counter outcome profile: masking of counters in outcome text.

A stuck agent often gets "the same" answer with a counter that moves on every
call: bash's ``/bin/bash: line 18516:`` prefix, a file viewer's ``(443 lines
total)``, a timestamp, an elapsed time, a process id, an object address, a
temp directory, a UUID. Hashed as is, every outcome looks new and no
no-progress rule can fire. :class:`VolatileMasker` replaces those tokens with
fixed placeholders and nothing else: a bare count (``processed 10 items``), a
test summary or a growing list keeps its difference, because those are
progress.

Speed. Python's ``re`` scans fast only where a pattern starts with one literal
character; a plain alternation of the token patterns costs about 250
instructions per character (8x hashing the same text). So the UTF-8 bytes are
translated with every digit turned into ``0`` (a C loop), and one pattern that
starts with the literal ``0`` finds every digit-led token (timestamps,
durations, viewer counts, addresses, UUIDs) at the first digit of a number;
each alternative after the number starts with a literal too, so re rejects the
common followers (space, comma, newline) cheaply, and what comes *before* the
number is checked in Python on the rare matches. Shell prefixes (``sh:``),
pids (``ID``/``pid``) and temp paths (``tmp``) are passes of their own, each
run only when its literal occurs. Text shorter than :data:`MIN_LENGTH` is not
scanned, and at most :data:`MAX_TOKENS` digit-led tokens are replaced per text.
The guard decides *when* to mask (only for a call that already has another
outcome in the window: docs/detection.md): masking is not free, about 4-8x
hashing the same text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "BUILTIN_CLASS_NAMES",
    "DEFAULT_MASKER",
    "MAX_TOKENS",
    "MIN_CONTEXT",
    "MIN_LENGTH",
    "VolatileMasker",
    "error_excerpt",
    "mask_volatile",
]

MIN_CONTEXT = 8
"""Tokens stay when fewer characters than this would be left around them: a
result that *is* a timestamp or a pid is the information itself, not noise."""
MIN_LENGTH = MIN_CONTEXT + 2
"""Shorter text is returned as it is, without scanning."""
MAX_TOKENS = 128
"""Digit-led tokens masked per text at most, which bounds the cost of a long log with a
timestamp on every line; the rest stays as it is, so equal texts still mask equally."""

EXCERPT_LENGTH = 160
"""Characters of an error kept by :func:`error_excerpt`."""
_ZERO = bytes.maketrans(b"123456789", b"000000000")
_HEX = rb"[0a-fA-F]"
_END = rb"(?![0A-Za-z_])"
_UNITS: tuple[bytes, ...] = (b"seconds", b"second", b"minutes", b"minute", b"secs", b"mins")
_UNITS += (b"sec", b"min", b"ms", b"us", b"ns", b"\xc2\xb5s", b"s")

# Pass 1, on the digits-to-"0" bytes: a number (the literal "0" that starts the
# pattern, a look-behind that skips digits inside a number, the rest of the
# number taken possessively), then what follows it. Every alternative starts
# with a literal, so re rejects the common followers (space, comma, newline) in
# its fast branch check; what came *before* the number is verified in Python,
# on the rare matches only.
_UNIT = rb"(?:" + b"|".join(_UNITS) + rb")" + _END
_UUID_REST = _HEX + rb"{4}-" + _HEX + rb"{12}(?![0a-zA-Z])"
_AFTER_NUMBER = (
    rb":00:00(?:[.,]0++)?(?![0:])",  # 13:30:08 (two-digit hour checked after)
    # 2024-05-10T11:36:51Z, or the rest of a UUID after its version digit
    rb"-(?:00-00[T ]00:00(?::00)?(?:[.,]0++)?(?:Z|[+-]00:?00)?|" + _UUID_REST + rb")",
    rb"[a-fA-F]" + _HEX + rb"{0,2}-" + _UUID_REST,
    rb" (?:lines total|more lines? (?:above|below))\)",  # (443 lines total)
    rb"x" + _HEX + rb"{6,16}" + _END,  # 0x7f3a5c2e10
    rb"\.0++ ?" + _UNIT,  # 0.53s, 1.5 seconds
    rb" " + _UNIT,  # 12 ms
    rb"m0++(?:\.0++)?s" + _END,  # 0m0.003s
    *(unit + _END for unit in _UNITS),  # 12ms
)
_NUMBER_TOKEN = re.compile(rb"0(?<![0.]0)0*+(?:" + b"|".join(_AFTER_NUMBER) + rb")")
# Shell error prefixes: /bin/bash: line 18516:  sh: 1:  zsh:1:
_SHELL_TOKEN = re.compile(rb"sh:(?: line)? ?0++(?=:)")
_SHELL_NAME = re.compile(rb"(?:^|[\s/])(?:ba|da|z|k)?$")
# PID: 4242, PIDs: 1, 2, Gemini CLI's "Process Group PGID: 4242", pid=4242
_PID_NUMBER = rb"s?(?: ?[:=] ?| )\[?0++(?:, ?0++)*"
_PID_TOKENS = (  # (a literal that must be there, the pattern)
    (b"ID", re.compile(rb"ID(?:(?<=PID)|(?<=GID)|(?<=ss ID))" + _PID_NUMBER)),
    (b"pid", re.compile(rb"pid(?:(?<![A-Za-z]pid)|(?<=ppid)(?<![A-Za-z]ppid))" + _PID_NUMBER)),
)
# A duration counts only after a word that says it is one (in 0.53s, took 12ms,
# Wall time: 3.1 seconds, real 0m0.02s) or in brackets: "ETA 7s" and "3 minutes
# remaining" count down toward an end, which is progress.
_DURATION_WORDS = frozenset(b"in took after elapsed duration time real user sys total".split())
_LETTERS = bytes(range(65, 91)) + bytes(range(97, 123))


def _is_duration(zeroed: bytes, start: int) -> bool:
    before = zeroed[max(0, start - 24) : start].rstrip(b" \t")
    if before.endswith((b"(", b"[")):
        return True
    before = before.rstrip(b":=").rstrip(b" \t")
    word = before[len(before.rstrip(_LETTERS)) :]
    return word.lower() in _DURATION_WORDS


_TEMP = re.compile(
    rb"/(?:tmp|var/tmp|(?:private/)?var/folders/[\w.-]+/[\w.-]+/T)/"
    rb"(?:tmp(?=[a-z_]{0,24}\d)[a-z0-9_]{6,}|tmp[a-z_]{8}(?![\w.-])|tmp\.[A-Za-z0-9]{6,}"
    rb"|pytest-of-[\w.-]+/pytest-\d+)"
)
_UUID_HEAD = re.compile(rb"(?:^|[^0-9a-zA-Z])" + _HEX + rb"{8}-" + _HEX + rb"{4}-$")
_DIGITS = re.compile(rb"\d+")

BUILTIN_CLASS_NAMES: tuple[str, ...] = (
    "shell_line",
    "viewer_lines",
    "iso_timestamp",
    "clock_time",
    "uuid",
    "address",
    "pid",
    "duration",
    "temp_path",
)
"""The built-in token classes, as :meth:`VolatileMasker.without` names them."""


def _classify(zeroed: bytes, start: int, end: int) -> tuple[str, int] | None:
    """The class of a number-led match and where its token starts, or None to keep it.

    Runs on matches only (rare), so the checks the pattern could not make
    cheaply (what precedes the number, how many digits it had) live here.
    """
    body = zeroed[start:end]
    prev = zeroed[start - 1] if start else 0x20
    if body[1:2] == b"x":
        return None if chr(prev).isalnum() or prev == 0x5F else ("address", start)
    if body[-1] == 0x29:  # ")"
        return ("viewer_lines", start) if prev == 0x28 else None  # "("
    if 0x3A in body:  # ":"
        if body[4:5] == b"-":
            return ("iso_timestamp", start) if body.index(b"-") == 4 else None
        # Exactly two hour digits, not part of file.py:12:34:56 or a version.
        return ("clock_time", start) if body.index(b":") == 2 and prev not in b":." else None
    if 0x2D in body:  # "-": the rest of a UUID, whose third group starts at a digit
        head = _UUID_HEAD.search(zeroed, max(0, start - 15), start)
        third = body.split(b"-", 1)[0]
        return ("uuid", head.end() - 14) if head is not None and len(third) == 4 else None
    return ("duration", start)


_REPLACEMENTS: dict[str, bytes | None] = {
    # None: each digit run of the token becomes "#" (keeps "bash: line #" readable).
    "shell_line": None,
    "viewer_lines": None,
    "iso_timestamp": b"<time>",
    "clock_time": b"<time>",
    "uuid": b"<uuid>",
    "address": b"0x<addr>",
    "pid": None,
    "duration": b"<dur>",
    "temp_path": b"/tmp/<tmp>",
}
_NUMBER_LED = frozenset(
    {"viewer_lines", "iso_timestamp", "clock_time", "uuid", "address", "duration"}
)

Span = tuple[int, int, bytes]


class VolatileMasker:
    """Replaces volatile tokens in text with placeholders.

    Usage::

        masker = VolatileMasker()                     # all built-in classes
        masker.mask("/bin/bash: line 18516: cd: x: No such file or directory")
        # -> "/bin/bash: line #: cd: x: No such file or directory"
        masker.without("clock_time")                  # a built-in class off
        masker.with_patterns([r"build #\\d+"])         # extra patterns, replaced by "#"
    """

    __slots__ = ("_extra", "_names", "_number", "_pid", "_shell", "_temp")

    def __init__(
        self,
        classes: Iterable[str] = BUILTIN_CLASS_NAMES,
        extra_patterns: Iterable[str | re.Pattern[str]] = (),
    ) -> None:
        names = frozenset(classes)
        unknown = sorted(names - set(BUILTIN_CLASS_NAMES))
        if unknown:
            raise ValueError(
                f"unknown volatile token class {unknown[0]!r}; "
                f"known: {', '.join(BUILTIN_CLASS_NAMES)}"
            )
        self._names = names
        self._number = bool(names & _NUMBER_LED)
        self._shell = "shell_line" in names
        self._pid = "pid" in names
        self._temp = "temp_path" in names
        self._extra = tuple(
            p if isinstance(p, re.Pattern) else re.compile(p) for p in extra_patterns
        )

    @property
    def classes(self) -> tuple[str, ...]:
        """The built-in classes this masker applies, in :data:`BUILTIN_CLASS_NAMES` order."""
        return tuple(n for n in BUILTIN_CLASS_NAMES if n in self._names)

    @property
    def extra_patterns(self) -> tuple[re.Pattern[str], ...]:
        return self._extra

    def with_patterns(self, patterns: Iterable[str | re.Pattern[str]]) -> VolatileMasker:
        """A masker that also replaces matches of ``patterns`` with ``#``."""
        return VolatileMasker(self._names, (*self._extra, *patterns))

    def without(self, *names: str) -> VolatileMasker:
        """A masker without the named built-in classes."""
        return VolatileMasker(self._names - set(names), self._extra)

    def mask(self, text: str) -> str:
        """``text`` with its volatile tokens replaced; the same object when nothing changed."""
        if len(text) < MIN_LENGTH:
            return text
        masked = self._mask_builtin(text) if self._names else text
        for pattern in self._extra:
            masked = pattern.sub("#", masked)
        return masked

    def _mask_builtin(self, text: str) -> str:
        data = text.encode("utf-8", "surrogatepass")
        zeroed = data.translate(_ZERO)
        if b"0" not in zeroed and b"tmp" not in data:
            return text  # every class but temp paths holds a digit
        spans: list[Span] = []
        if self._number:
            self._number_spans(data, zeroed, spans)
        if self._shell and b"sh:" in zeroed:
            for m in _SHELL_TOKEN.finditer(zeroed):
                start = m.start()
                if _SHELL_NAME.search(zeroed, max(0, start - 5), start) is not None:
                    spans.append((m.start(), m.end(), _DIGITS.sub(b"#", data[start : m.end()])))
        if self._pid:
            for gate, pattern in _PID_TOKENS:
                if gate not in zeroed:
                    continue
                for m in pattern.finditer(zeroed):
                    start, end = m.start(), m.end()
                    spans.append((start, end, _DIGITS.sub(b"#", data[start:end])))
        if self._temp and b"tmp" in data:
            spans.extend((m.start(), m.end(), b"/tmp/<tmp>") for m in _TEMP.finditer(data))
        if not spans:
            return text
        spans.sort()
        pieces: list[bytes] = []
        last = kept = 0
        for start, end, replacement in spans:
            if start < last:
                continue  # inside a token already replaced
            pieces.append(data[last:start])
            pieces.append(replacement)
            kept += start - last
            last = end
        kept += len(data) - last
        if kept < MIN_CONTEXT:
            return text
        pieces.append(data[last:])
        return b"".join(pieces).decode("utf-8", "surrogatepass")

    def _number_spans(self, data: bytes, zeroed: bytes, spans: list[Span]) -> None:
        names = self._names
        for m in _NUMBER_TOKEN.finditer(zeroed):
            found = _classify(zeroed, m.start(), m.end())
            if found is None:
                continue
            name, start = found
            if name not in names:
                continue
            if name == "duration" and not _is_duration(zeroed, start):
                continue
            replacement = _REPLACEMENTS[name]
            if replacement is None:
                replacement = _DIGITS.sub(b"#", data[start : m.end()])
            spans.append((start, m.end(), replacement))
            if len(spans) >= MAX_TOKENS:
                break

    def mask_value(self, value: Any) -> Any:
        """Every string inside a JSON-like value masked (mapping keys are kept)."""
        if isinstance(value, str):
            return self.mask(value)
        if isinstance(value, Mapping):
            return {k: self.mask_value(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.mask_value(v) for v in value]
        return value


DEFAULT_MASKER = VolatileMasker()


def mask_volatile(text: str) -> str:
    """``text`` with the built-in volatile token classes masked."""
    return DEFAULT_MASKER.mask(text)


def error_excerpt(message: str, masker: VolatileMasker = DEFAULT_MASKER) -> str:
    """The line that says what went wrong, masked and cut: what "the same error" means.

    That is the first non-blank line, joined with the next one when it is only a
    header (``ERROR:``), or the last line of a Python traceback. Bounded work
    whatever the error's size, so a failure-streak detector can compare every
    failure of a tool cheaply.
    """
    head = message[: EXCERPT_LENGTH * 4].lstrip()
    end = head.find("\n")
    line = (head if end < 0 else head[:end]).strip()
    if line.startswith("Traceback (most recent call last)"):
        tail = message[-EXCERPT_LENGTH * 2 :].rstrip()
        line = tail[tail.rfind("\n") + 1 :].strip()
    elif line.endswith(":") and len(line) < 40 and end >= 0:
        rest = head[end + 1 :].lstrip()
        nxt = rest[: max(0, rest.find("\n"))] if "\n" in rest else rest
        if nxt.strip():
            line = f"{line} {nxt.strip()}"
    return masker.mask(line)[:EXCERPT_LENGTH]
