"""The real recorded runs of ``../shared/realdata`` as a trace replay reads (benchmarks only).

``dev-calls.jsonl.gz`` holds one tool call per line in a neutral shape; the
benchmarks write it as Anthropic Messages conversations, one run per JSONL
line, with raw params and results (never shipped; the data stays outside the
package).
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import orjson
from _realdata import find_data

from loopwarden.hashing import args_hash, digest, hash_outcome

__all__ = ["DATA", "convert", "floor"]

try:  # found the way the efficacy benchmarks find it (LOOPWARDEN_REALDATA, ../shared)
    DATA = find_data() / "dev-calls.jsonl.gz"
except SystemExit:
    DATA = Path("../shared/realdata/dev-calls.jsonl.gz")  # missing: the benchmarks say so


def convert(source: Path, out: Path, *, copies: int = 1, limit: int | None = None) -> int:
    """One Anthropic Messages conversation per run (``copies`` times, the first ``limit`` runs);
    returns the number of calls written."""
    runs: list[bytes] = []
    with gzip.open(source, "rb") as raw:
        key: Any = None
        messages: list[Any] = []
        count = 0

        def flush() -> None:
            if messages:
                runs.append(
                    orjson.dumps({"id": f"{key[0]}/{key[1]}", "messages": messages}) + b"\n"
                )

        for line in raw:
            rec = orjson.loads(line)
            run = (rec["source"], rec["run"])
            if run != key:
                flush()
                if limit is not None and len(runs) >= limit:
                    messages = []  # not flushed again below
                    break
                key, messages = run, [{"role": "user", "content": "task"}]
            if rec.get("compaction"):
                messages.append({"type": "compaction"})
                continue
            call_id = f"c{rec['i']}"
            args = rec["args"] if isinstance(rec["args"], dict) else {"input": rec["args"]}
            result = rec["result"]
            text = result if isinstance(result, str) else orjson.dumps(result).decode()
            messages.append(
                {
                    "role": "assistant",
                    "content": [
                        {"type": "tool_use", "id": call_id, "name": rec["tool"], "input": args}
                    ],
                }
            )
            block = {"type": "tool_result", "tool_use_id": call_id, "content": text}
            if rec.get("error"):
                block["is_error"] = True
            messages.append({"role": "user", "content": [block]})
            count += 1
        flush()
        calls = count
    with out.open("wb") as sink:
        for _ in range(copies):
            sink.writelines(runs)
    return calls * copies


def floor(path: Path, *, guard_hashes: bool = False) -> int:
    """Read, parse and hash the params and results of every call once: the floor of replay.

    ``guard_hashes``: hash them the way the guard must (``args_hash`` and
    ``hash_outcome``, with outcome profiles and the unknown-tool wordings of
    errors) instead of a bare ``digest``. Returns the calls seen.
    """
    calls = 0
    loads = orjson.loads
    pending: dict[str, tuple[str, Any]] = {}
    with path.open("rb") as handle:
        for line in handle:
            conv = loads(line)
            for message in conv["messages"]:
                content = message.get("content")
                if not isinstance(content, list):
                    continue
                for block in content:
                    kind = block["type"]
                    if kind == "tool_use":
                        calls += 1
                        if guard_hashes:
                            args_hash(block["name"], block["input"])
                            pending[block["id"]] = (block["name"], block["input"])
                        else:
                            digest(block["input"])
                    elif kind == "tool_result":
                        if guard_hashes:
                            tool, params = pending.pop(block["tool_use_id"])
                            text = block["content"]
                            if block.get("is_error"):
                                hash_outcome(tool, params, error=text)
                            else:
                                hash_outcome(tool, params, result=text)
                        else:
                            digest(block["content"])
    return calls
