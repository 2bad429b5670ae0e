"""What ``loopwarden install`` wrote, so that ``--uninstall`` can give the file back.

One small JSON file next to the state (``~/.local/share/loopwarden/installs.json``)
maps each settings file loopwarden changed to: the file as it was before
loopwarden's entries went in (the backup copy ``install`` made, or "there was no
file"), the SHA-256 of what loopwarden wrote last, and the containers it created.
When the file is still exactly what loopwarden wrote, uninstalling restores the
original bytes; otherwise only loopwarden's entries are removed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..stores.sqlite import default_state_path

__all__ = ["InstallRecord", "forget", "load", "record_path", "remember", "sha256"]


def sha256(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


@dataclass
class InstallRecord:
    """One settings file's install history."""

    after: str | None = None
    """SHA-256 of the bytes loopwarden wrote last."""
    original: str | None = None
    """Where the file before loopwarden's entries is: a backup path, ``"absent"`` (there
    was no file), or None (unknown: it already had loopwarden entries)."""
    original_sha: str | None = None
    created: list[str] = field(default_factory=list)
    """Containers loopwarden created (``hooks`` and event lists): removed again on uninstall."""

    def original_bytes(self) -> bytes | None:
        """The file before the install, if it is still known exactly (b"" never: see absent)."""
        if self.original is None or self.original == "absent":
            return None
        try:
            data = Path(self.original).read_bytes()
        except OSError:
            return None
        return data if sha256(data) == self.original_sha else None


def record_path(env: Mapping[str, str]) -> Path:
    return default_state_path(env).parent / "installs.json"


def _read(env: Mapping[str, str]) -> dict[str, Any]:
    try:
        data = json.loads(record_path(env).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write(env: Mapping[str, str], data: dict[str, Any]) -> None:
    path = record_path(env)
    with contextlib.suppress(OSError):  # the record is a convenience: never fail over it
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)


def load(env: Mapping[str, str], settings: Path) -> InstallRecord | None:
    entry = _read(env).get(str(settings))
    if not isinstance(entry, dict):
        return None
    created = entry.get("created")
    return InstallRecord(
        after=entry.get("after") if isinstance(entry.get("after"), str) else None,
        original=entry.get("original") if isinstance(entry.get("original"), str) else None,
        original_sha=(
            entry.get("original_sha") if isinstance(entry.get("original_sha"), str) else None
        ),
        created=[c for c in created if isinstance(c, str)] if isinstance(created, list) else [],
    )


def remember(
    env: Mapping[str, str],
    settings: Path,
    *,
    before: bytes | None,
    backup: Path | None,
    had_ours: bool,
    written: bytes,
    created: list[str],
) -> None:
    """Record an install that turned ``before`` (None: no file) into ``written``."""
    previous = load(env, settings)
    if not had_ours:  # the file as the user had it, without any loopwarden entry
        record = InstallRecord(
            original="absent" if before is None else (str(backup) if backup else None),
            original_sha=sha256(before),
        )
    elif previous is not None and previous.after == sha256(before):
        record = previous  # an upgrade of our own, untouched entries: same original
    else:
        record = InstallRecord(created=previous.created if previous else [])
    record.after = sha256(written)
    record.created = sorted(set(record.created) | set(created))
    data = _read(env)
    data[str(settings)] = asdict(record)
    _write(env, data)


def forget(env: Mapping[str, str], settings: Path) -> None:
    data = _read(env)
    if data.pop(str(settings), None) is not None:
        _write(env, data)
