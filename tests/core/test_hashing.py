"""Canonical form, call signatures and outcome hashes (SPEC section 2)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import enum
import hashlib
import re
import uuid
from collections import OrderedDict, namedtuple
from pathlib import PurePosixPath
from typing import Any

import orjson
import pytest

from loopwarden._canonical import _Normaliser, canonical_bytes, digest
from loopwarden.hashing import (
    ToolOutcome,
    args_hash,
    extract_unknown_tool_name,
    hash_outcome,
    is_known_poll,
)
from loopwarden.profiles import OutcomeProfile, ProfileRegistry

HEX64 = re.compile(r"^[0-9a-f]{64}$")


class TestCanonical:
    def test_key_order_does_not_matter(self) -> None:
        """Mappings are serialised with sorted keys."""
        assert canonical_bytes({"b": 2, "a": 1}) == b'{"a":1,"b":2}'
        assert digest({"b": 2, "a": 1}) == digest({"a": 1, "b": 2})

    def test_digest_is_sha256_of_the_canonical_json(self) -> None:
        """The digest is plain SHA-256 over the canonical bytes, so it is the same everywhere."""
        assert digest({"b": 2, "a": 1}) == hashlib.sha256(b'{"a":1,"b":2}').hexdigest()
        assert digest("abc") == hashlib.sha256(b'"abc"').hexdigest()
        assert digest(None) == hashlib.sha256(b"null").hexdigest()

    def test_numbers_compare_by_value(self) -> None:
        """1 and 1.0 are equal, -0.0 equals 0, huge integral floats equal their ints."""
        assert digest(1) == digest(1.0)
        assert digest(-0.0) == digest(0)
        assert digest({"x": [1.0, 2]}) == digest({"x": [1, 2.0]})
        assert digest(1e20) == digest(10**20)
        assert digest(2**70) == digest(float(2**70))
        assert digest(1.5) != digest(1)
        assert digest(True) != digest(1)

    def test_non_finite_floats_are_strings(self) -> None:
        """NaN and the infinities serialise as fixed strings (never raise)."""
        assert canonical_bytes(float("nan")) == b'"NaN"'
        assert canonical_bytes(float("inf")) == b'"Infinity"'
        assert canonical_bytes([float("-inf")]) == b'["-Infinity"]'
        assert digest({"v": float("nan")}) == digest({"v": float("nan")})

    def test_tuples_are_lists_and_sets_are_sorted(self) -> None:
        """Tuples serialise as lists; sets in a stable order."""
        assert digest((1, 2, "x")) == digest([1, 2, "x"])
        assert digest({3, 1, 2}) == digest({2, 3, 1}) == digest(frozenset({1, 2, 3}))

    def test_bytes_are_tagged_base64(self) -> None:
        """Bytes become a tagged base64 value, distinct from the same text."""
        # The space after the tag's colon: compact JSON of plain data never has one, so
        # a mapping {"$bytes": "aGk="} (a tool result can be anything) hashes apart.
        assert canonical_bytes(b"hi") == b'{"$bytes": "aGk="}'
        assert digest(b"hi") != digest({"$bytes": "aGk="})
        assert digest(b"hi") == digest(bytearray(b"hi")) == digest(memoryview(b"hi"))
        assert digest(b"hi") != digest("hi")

    def test_cycles_become_a_marker_and_shared_values_are_serialised_in_full(self) -> None:
        """A value that contains itself becomes "[Circular]"; a shared value is repeated."""
        shared = {"k": [1, 2]}
        a: dict[str, Any] = {"first": shared, "second": shared}
        a["self"] = a
        shared2 = {"k": [1, 2]}
        b: dict[str, Any] = {"second": shared2, "first": {"k": [1, 2]}}
        b["self"] = b
        assert digest(a) == digest(b)
        assert orjson.loads(canonical_bytes(a)) == {
            "first": {"k": [1, 2]},
            "second": {"k": [1, 2]},
            "self": "[Circular]",
        }

    def test_cycle_through_a_list(self) -> None:
        """Cycles through lists are detected too."""
        items: list[Any] = [1]
        items.append(items)
        assert orjson.loads(canonical_bytes(items)) == [1, "[Circular]"]

    def test_common_python_values_by_data(self) -> None:
        """Dataclasses, enums, datetimes, UUIDs, paths, decimals serialise by their data."""

        @dataclasses.dataclass
        class Point:
            x: int
            y: float

        class Colour(enum.Enum):
            RED = "red"

        Pair = namedtuple("Pair", "a b")  # noqa: PYI024 - the collections form is what is tested
        value = {
            "point": Point(1, 2.0),
            "colour": Colour.RED,
            "when": dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
            "day": dt.date(2026, 1, 2),
            "id": uuid.UUID(int=5),
            "path": PurePosixPath("/tmp/x"),
            "money": decimal.Decimal("2.50"),
            "pair": Pair(1, 2),
            "ordered": OrderedDict([("b", 1), ("a", 2)]),
        }
        assert orjson.loads(canonical_bytes(value)) == {
            "colour": "red",
            "day": "2026-01-02",
            "id": "00000000-0000-0000-0000-000000000005",
            "money": 2.5,
            "ordered": {"a": 2, "b": 1},
            "pair": [1, 2],
            "path": "/tmp/x",
            "point": {"x": 1, "y": 2},
            "when": "2026-01-02T03:04:05+00:00",
        }
        assert digest(decimal.Decimal("3.0")) == digest(3)

    def test_pydantic_models_by_data(self) -> None:
        """Pydantic models hash like the plain mapping of their fields."""
        pydantic = pytest.importorskip("pydantic")

        class Query(pydantic.BaseModel):
            path: str
            depth: int = 1

        assert digest(Query(path="/a")) == digest({"path": "/a", "depth": 1})

    def test_other_objects_never_use_an_address(self) -> None:
        """Arbitrary objects serialise by type name and public data, stable across instances."""

        class Thing:
            def __init__(self, n: int) -> None:
                self.n = n
                self._private = object()

        data = orjson.loads(canonical_bytes(Thing(3)))
        assert data["data"] == {"n": 3}
        assert data["$type"].endswith("Thing")
        assert digest(Thing(3)) == digest(Thing(3))
        assert digest(Thing(3)) != digest(Thing(4))
        assert b"0x" not in canonical_bytes(object())
        assert digest(object()) == digest(object())

    def test_mixed_key_types(self) -> None:
        """Non-string keys are converted; colliding keys do not depend on insertion order."""
        assert digest({1: "a"}) == digest({"1": "a"})
        assert digest({1: "a", "1": "b"}) == digest({"1": "b", 1: "a"})
        assert digest({(1, 2): "x"}) == digest({"[1,2]": "x"})

    def test_keys_that_are_not_exactly_str_take_the_normalising_path(self) -> None:
        """The fast path leaves key types to orjson: a key of a str subclass, an enum or
        another type still hashes as the normalising path writes it."""

        class Key(str):
            pass

        class Colour(enum.StrEnum):
            RED = "red"

        for value in ({Key("k"): 1}, {Colour.RED: 1}, {"a": {2: "b"}}, [{None: 1}]):
            normalised = orjson.dumps(_Normaliser().value(value, 0), option=orjson.OPT_SORT_KEYS)
            assert canonical_bytes(value) == normalised
            assert digest(value) == hashlib.sha256(normalised).hexdigest()
        # An enum key is written as its JSON value, unlike the plain string key.
        assert digest({Colour.RED: 1}) != digest({"red": 1})
        assert digest({Key("k"): 1}) == digest({"k": 1})

    def test_big_integers_and_deep_nesting(self) -> None:
        """Integers beyond 64 bits and very deep values still hash, exactly."""
        assert digest(10**30) != digest(10**30 + 1)
        deep: Any = "leaf"
        for _ in range(400):
            deep = [deep]
        other: Any = "leaf2"
        for _ in range(400):
            other = [other]
        assert HEX64.match(digest(deep))
        assert digest(deep) != digest(other)
        assert b"$unhashable" not in canonical_bytes(deep)

    def test_very_deep_values_hash_the_same_from_any_call_depth(self) -> None:
        """Depth never makes a value unhashable, and the caller's stack does not matter."""
        deep: Any = {"leaf": 1.0}
        for i in range(5000):
            deep = {"child": deep, "i": i % 3}
        twin: Any = {"leaf": 1}
        for i in range(5000):
            twin = {"i": i % 3, "child": twin}
        expected = digest(deep)
        assert expected == digest(twin)
        assert b"$unhashable" not in canonical_bytes(deep)

        def nested(n: int) -> str:
            return digest(deep) if n == 0 else nested(n - 1)

        assert nested(600) == expected

    def test_deep_cycles(self) -> None:
        """A cycle deep inside a value is still detected."""
        root: dict[str, Any] = {}
        node = root
        for _ in range(300):
            node["next"] = {}
            node = node["next"]
        node["back"] = root
        assert HEX64.match(digest(root))

    def test_lone_surrogates(self) -> None:
        """Strings that are not valid UTF-8 hash without raising, and stay distinct."""
        assert digest("\ud800") != digest("\ud801")
        assert digest({"s": "\udfff"}) == digest({"s": "\udfff"})


class TestArgsHash:
    """Upstream hashing scenarios (reference section 6.1, tests 1-7)."""

    def test_same_params_same_hash(self) -> None:
        assert args_hash("read", {"path": "/a"}) == args_hash("read", {"path": "/a"})

    def test_different_params_or_tools_differ(self) -> None:
        assert args_hash("read", {"path": "/a"}) != args_hash("read", {"path": "/b"})
        assert args_hash("read", {"path": "/a"}) != args_hash("write", {"path": "/a"})

    @pytest.mark.parametrize("params", ["string-param", 123, None])
    def test_non_mapping_params(self, params: Any) -> None:
        sig = args_hash("tool", params)
        assert sig.startswith("tool:") and HEX64.match(sig[5:])

    def test_key_order(self) -> None:
        assert args_hash("t", {"a": 1, "b": 2}) == args_hash("t", {"b": 2, "a": 1})

    def test_large_params(self) -> None:
        assert len(args_hash("read", {"data": "x" * 20000})) == len("read:") + 64

    def test_circular_params(self) -> None:
        first: dict[str, Any] = {"first": {"v": 1}, "second": {"v": 1}}
        first["self"] = first
        second: dict[str, Any] = {"second": {"v": 1}, "first": {"v": 1}}
        second["self"] = second
        assert args_hash("t", first) == args_hash("t", second)
        assert re.match(r"^t:[0-9a-f]{64}$", args_hash("t", first))


class TestUnknownToolName:
    @pytest.mark.parametrize(
        ("message", "name"),
        [
            ("Tool exec not found", "exec"),
            ("Unknown tool: Foo_Bar", "foo_bar"),
            ("unknown tool 'web.search'", "web.search"),
            ('tool "fetch-url" is not available', "fetch-url"),
            ("  Unknown tool:   spaced  ", "spaced"),
            ("Tool 'X' not found.", "x"),
            ("Unknown tool name: 'no_such_tool'. Available tools: 'a'", "no_such_tool"),
            ("<tool_use_error>Error: No such tool available: NoSuch</tool_use_error>", "nosuch"),
            ("unsupported call: no_such_tool", "no_such_tool"),
            ("Error: ghost is not a valid tool, try one of [a, b].", "ghost"),
            ("permission denied", None),
            ("", None),
        ],
    )
    def test_extraction(self, message: str, name: str | None) -> None:
        assert extract_unknown_tool_name(message) == name

    def test_every_wording_holds_the_words_checked_first(self) -> None:
        """The substring test that skips the patterns must not hide one of them."""
        from loopwarden.profiles.coding_agents import UNKNOWN_TOOL_PATTERNS

        for pattern in UNKNOWN_TOOL_PATTERNS:
            assert "tool" in pattern.pattern or "unsupported call" in pattern.pattern

    def test_every_pattern_holds_the_words_its_hints_name(self) -> None:
        """Each pattern is skipped on ASCII text only when a word it matches literally is
        missing: its hints are words of the pattern, and every wording above still needs
        its pattern."""
        from loopwarden.profiles.coding_agents import UNKNOWN_TOOL_HINTS, UNKNOWN_TOOL_PATTERNS

        assert len(UNKNOWN_TOOL_HINTS) == len(UNKNOWN_TOOL_PATTERNS)
        for pattern, hints in zip(UNKNOWN_TOOL_PATTERNS, UNKNOWN_TOOL_HINTS, strict=True):
            assert hints
            for group in hints:
                assert all(word == word.lower() for word in group)
                assert all(word in pattern.pattern.lower() for word in group), pattern.pattern
            # Every alternative of a group is one the pattern offers at that place.
            if len(hints) > 1:
                tail = pattern.pattern.rsplit("(?:", 1)[1].rstrip(")")
                assert set(tail.split("|")) == set(hints[-1])

    @pytest.mark.parametrize(
        "message",
        [
            "Ünknown: Unknown tool: café_tool",  # not ASCII: every pattern is run
            "TOOL   Exec   NOT FOUND",
            "tool exec does not exist",
            "Tried to call unavailable tool: 'ghost'",
            "error:  ghost is not a valid tool",
        ],
    )
    def test_hints_skip_nothing_that_matches(self, message: str) -> None:
        """The result is the one every pattern in order gives, with or without the hints."""
        from loopwarden.profiles.coding_agents import UNKNOWN_TOOL_PATTERNS

        expected = None
        for pattern in UNKNOWN_TOOL_PATTERNS:
            match = pattern.search(message.strip())
            if match:
                expected = match.group(1).strip().lower()
                break
        assert expected is not None
        assert extract_unknown_tool_name(message) == expected

    def test_wording_deep_in_a_long_error(self) -> None:
        """A long error (a trace, a command's output) is still searched whole."""
        assert extract_unknown_tool_name("x" * 50_000 + " Unknown tool: late") == "late"
        assert extract_unknown_tool_name("UNSUPPORTED CALL: Shout") == "shout"
        assert extract_unknown_tool_name("Traceback ...\n" * 5_000) is None


class TestOutcomeHash:
    def test_error_outcome(self) -> None:
        """Errors hash their message (or type name), with the error: prefix."""
        out = hash_outcome("read", {}, error=ValueError("boom"))
        assert out.hash == "error:" + digest("boom") and out.is_error
        assert hash_outcome("read", {}, error=KeyError()).hash == "error:" + digest("KeyError")
        assert hash_outcome("read", {}, error="boom").hash == out.hash
        assert hash_outcome(
            "exec", {}, error=RuntimeError("Tool exec not found")
        ).unknown_tool_name == ("exec")

    def test_traceback_is_ignored(self) -> None:
        """Two raises of the same error give one outcome hash."""

        def fail() -> None:
            raise RuntimeError("same")

        hashes = set()
        for _ in range(2):
            try:
                fail()
            except RuntimeError as exc:
                hashes.add(hash_outcome("t", {}, error=exc).hash)
        assert len(hashes) == 1

    def test_no_result_records_nothing_but_none_is_a_result(self) -> None:
        assert hash_outcome("t", {}).hash is None
        assert hash_outcome("t", {}, result=None).hash == digest(None)
        assert hash_outcome("t", {}, result=None, error=None).hash == digest(None)

    def test_loop_veto_records_nothing_but_other_blocks_do(self) -> None:
        veto = {"details": {"status": "blocked", "deniedReason": "tool-loop"}}
        assert hash_outcome("t", {}, result=veto).hash is None
        plugin = {"details": {"status": "blocked", "deniedReason": "plugin-before-tool-call"}}
        assert hash_outcome("t", {}, result=plugin).hash is not None

    def test_plain_values_hash_whole(self) -> None:
        """A mapping with neither content nor details is hashed whole (differs from OpenClaw)."""
        assert (
            hash_outcome("t", {}, result={"t": 20}).hash
            != hash_outcome("t", {}, result={"t": 21}).hash
        )
        assert hash_outcome("t", {}, result="abc").hash == digest("abc")
        assert hash_outcome("t", {}, result=[1, 2]).hash == digest([1, 2])

    def test_tool_result_shape(self) -> None:
        """content text blocks are joined and trimmed; details and text are hashed together."""
        result = {
            "content": [
                {"type": "text", "text": " a "},
                {"type": "image", "data": "..."},
                {"type": "resource", "text": "b"},
            ],
            "details": {"ok": True},
        }
        expected = digest(
            {"details": {"ok": True}, "text": "a \nb", "blocks": [{"type": "image", "data": "..."}]}
        )
        assert hash_outcome("read", {}, result=result).hash == expected
        text_only = {"content": [{"type": "text", "text": " a "}], "details": {"ok": True}}
        assert hash_outcome("read", {}, result=text_only).hash == digest(
            {"details": {"ok": True}, "text": "a"}
        )
        assert hash_outcome("read", {}, result={"content": " same "}).hash == digest(
            {"details": {}, "text": "same"}
        )
        assert hash_outcome("read", {}, result={"details": "not a mapping"}).hash == digest(
            {"details": {}, "text": ""}
        )

    def test_results_without_text_are_not_confused(self) -> None:
        """Two different screenshots are two different outcomes (SPEC hashes text only)."""

        def shot(data: str) -> dict[str, Any]:
            return {"content": [{"type": "image", "data": data, "mimeType": "image/png"}]}

        assert (
            hash_outcome("screenshot", {}, result=shot("AAAA")).hash
            != hash_outcome("screenshot", {}, result=shot("BBBB")).hash
        )
        assert (
            hash_outcome("screenshot", {}, result=shot("AAAA")).hash
            == hash_outcome("screenshot", {}, result=shot("AAAA")).hash
        )

    def test_mcp_structured_content_and_errors(self) -> None:
        """MCP results: structuredContent counts as details; isError is an error outcome."""
        ok = {"content": [{"type": "text", "text": "42"}], "structuredContent": {"v": 42}}
        assert hash_outcome("t", {}, result=ok).hash == digest({"details": {"v": 42}, "text": "42"})
        err = {"content": [{"type": "text", "text": "Unknown tool: ghost"}], "isError": True}
        out = hash_outcome("t", {}, result=err)
        assert out.is_error and out.hash == "error:" + digest("Unknown tool: ghost")
        assert out.unknown_tool_name == "ghost"

    def test_mcp_result_objects(self) -> None:
        """A CallToolResult model object is taken apart by its fields."""
        types = pytest.importorskip("mcp.types")
        result = types.CallToolResult(
            content=[types.TextContent(type="text", text="Unknown tool: ghost")], is_error=True
        )
        out = hash_outcome("t", {}, result=result)
        assert out.is_error and out.unknown_tool_name == "ghost"

    def test_exec_running_ignores_volatile_fields(self) -> None:
        """exec running: only status and tail count (reference test 27)."""
        hashes = {
            hash_outcome(
                "exec",
                {"command": "tail -f log"},
                result={
                    "content": [{"type": "text", "text": f"session {i} pid {100 + i}"}],
                    "details": {
                        "status": "running",
                        "tail": "(no new output)",
                        "sessionId": f"s{i}",
                        "pid": 100 + i,
                        "startedAt": i,
                        "cwd": f"/w{i}",
                    },
                },
            ).hash
            for i in range(5)
        }
        assert len(hashes) == 1

    def test_exec_completed_identity(self) -> None:
        """exec completed/failed: status, exit code, timed-out flag and output only."""

        def run(i: int, output: str, exit_code: Any = 0, timed_out: Any = False) -> str | None:
            return hash_outcome(
                "exec",
                {"command": "x"},
                result={
                    "content": [{"type": "text", "text": "fallback"}],
                    "details": {
                        "status": "completed",
                        "exitCode": exit_code,
                        "aggregated": output,
                        "durationMs": i * 10,
                        "cwd": f"/w{i}",
                        "timedOut": timed_out,
                    },
                },
            ).hash

        assert run(1, "Loki\nPrometheus") == run(2, "  Loki\nPrometheus  ")
        assert run(1, "a") != run(1, "b")
        assert run(1, "a", exit_code=0) != run(1, "a", exit_code=1)
        assert run(1, "a", timed_out="yes") == run(1, "a", timed_out=False)
        assert run(1, "a", timed_out=True) != run(1, "a")
        assert run(1, "   ") == run(2, "")  # blank output falls back to the text

    def test_exec_approval_and_other_statuses(self) -> None:
        base = {"status": "approval-pending", "reason": "r", "host": "h", "command": "ls"}
        a = hash_outcome("exec", {}, result={"details": {**base, "requestId": 1}}).hash
        b = hash_outcome("exec", {}, result={"details": {**base, "requestId": 2}}).hash
        assert a == b
        c = hash_outcome("exec", {}, result={"details": {"status": "weird", "n": 1}}).hash
        d = hash_outcome("exec", {}, result={"details": {"status": "weird", "n": 2}}).hash
        assert c != d  # unknown statuses fall through to the generic rule

    def test_process_poll_and_log(self) -> None:
        """process poll/log hash only their identity fields."""
        poll = {"action": "poll", "sessionId": "s1"}
        a = hash_outcome(
            "process",
            poll,
            result={
                "content": "(no new output)",
                "details": {"status": "running", "aggregated": "x", "ts": 1},
            },
        ).hash
        b = hash_outcome(
            "process",
            poll,
            result={
                "content": "(no new output)",
                "details": {"status": "running", "aggregated": "x", "ts": 2},
            },
        ).hash
        assert a == b
        log = {"action": "log"}
        c = hash_outcome(
            "process", log, result={"content": "l", "details": {"totalLines": 3, "x": 1}}
        ).hash
        d = hash_outcome(
            "process", log, result={"content": "l", "details": {"totalLines": 3, "x": 2}}
        ).hash
        e = hash_outcome("process", log, result={"content": "l", "details": {"totalLines": 4}}).hash
        assert c == d != e
        long = hash_outcome("process", log, result={"content": "x" * 40000, "details": {}})
        assert long.hash is not None and HEX64.match(long.hash)

    @staticmethod
    def _send_result(i: int, **extra: Any) -> dict[str, Any]:
        payload = {
            "ok": True,
            "channel": "feishu",
            "chatId": "oc_chat",
            "runId": f"run_{i}",
            "messageId": f"om_{i}",
            "receipt": {"platformMessageId": f"p_{i}"},
            **extra,
        }
        return {
            "content": [{"type": "text", "text": orjson.dumps(payload).decode()}],
            "details": payload,
        }

    def test_message_sends_ignore_volatile_ids(self) -> None:
        """Reference tests 41, 50, 51: send ids are stripped, other actions hash generically."""
        send = {"action": "send", "target": "x", "text": "ping"}
        assert (
            hash_outcome("message", send, result=self._send_result(0)).hash
            == hash_outcome("message", send, result=self._send_result(1)).hash
        )
        read = {"action": "read"}
        r0 = {"details": {"ok": True, "messageId": "m_0", "ts": 1000}}
        r1 = {"details": {"ok": True, "messageId": "m_1", "ts": 2000}}
        assert (
            hash_outcome("message", read, result=r0).hash
            != hash_outcome("message", read, result=r1).hash
        )
        route_a = self._send_result(0, route={"id": "conv-A"})
        route_b = self._send_result(0, route={"id": "conv-B"})
        assert (
            hash_outcome("message", send, result=route_a).hash
            != hash_outcome("message", send, result=route_b).hash
        )

    def test_delivered_message_objects_lose_their_id(self) -> None:
        """Reference tests 54 and 55."""

        def delivered(i: int, room: str) -> dict[str, Any]:
            return {
                "details": {
                    "message": {
                        "id": f"qa_{i}",
                        "accountId": "acct",
                        "direction": "outbound",
                        "conversation": {"id": room},
                        "senderId": "bot",
                        "text": "hello",
                        "timestamp": 1000 + i,
                    }
                }
            }

        send = {"action": "send"}
        assert (
            hash_outcome("message", send, result=delivered(0, "r")).hash
            == hash_outcome("message", send, result=delivered(1, "r")).hash
        )
        assert (
            hash_outcome("message", send, result=delivered(0, "r1")).hash
            != hash_outcome("message", send, result=delivered(0, "r2")).hash
        )

    @pytest.mark.parametrize("tool", ["sessions_send", "conversations_send", "conversations_turn"])
    def test_send_tools(self, tool: str) -> None:
        a = hash_outcome(tool, {}, result={"details": {"ok": True, "runId": "r1"}}).hash
        b = hash_outcome(tool, {}, result={"details": {"ok": True, "runId": "r2"}}).hash
        assert a == b

    def test_user_send_tools_and_profiles(self) -> None:
        """Users name extra send tools and per-tool volatile keys and patterns."""
        registry = ProfileRegistry.create(
            {
                "deploy": OutcomeProfile.build(
                    volatile_keys=["requestId"], volatile_patterns=[r"took \d+ms"]
                )
            },
            send_tools=["slack_post"],
        )
        a = {"details": {"ok": True, "messageId": "1"}}
        b = {"details": {"ok": True, "messageId": "2"}}
        assert (
            hash_outcome("slack_post", {}, result=a, profiles=registry).hash
            == hash_outcome("slack_post", {}, result=b, profiles=registry).hash
        )
        assert (
            hash_outcome("slack_post", {}, result=a).hash
            != hash_outcome("slack_post", {}, result=b).hash
        )
        d1 = {"status": "ok", "requestId": "r1", "log": "done, took 35ms"}
        d2 = {"status": "ok", "requestId": "r2", "log": "done, took 41ms"}
        assert (
            hash_outcome("deploy", {}, result=d1, profiles=registry).hash
            == hash_outcome("deploy", {}, result=d2, profiles=registry).hash
        )
        assert (
            hash_outcome("deploy", {}, result=d1).hash != hash_outcome("deploy", {}, result=d2).hash
        )

    def test_claude_code_bash_and_codex_shell(self) -> None:
        """Built-in profiles: Claude Code Bash/BashOutput shapes and Codex's shell header."""
        bash1 = {
            "stdout": "ok",
            "stderr": "",
            "interrupted": False,
            "isImage": False,
            "backgroundTaskId": "a",
        }
        bash2 = {**bash1, "backgroundTaskId": "b"}
        assert (
            hash_outcome("Bash", {}, result=bash1).hash
            == hash_outcome("Bash", {}, result=bash2).hash
        )
        assert (
            hash_outcome("Bash", {}, result=bash1).hash
            != hash_outcome("Bash", {}, result={**bash1, "stdout": "changed"}).hash
        )
        tail = "Process exited with code 0\nOutput:\npending\n"
        out1 = "Chunk ID: b6f16f\nWall time: 0.0000 seconds\n" + tail
        out2 = "Chunk ID: 9a0c11\nWall time: 0.0132 seconds\n" + tail
        assert (
            hash_outcome("Bash", {}, result=out1).hash == hash_outcome("Bash", {}, result=out2).hash
        )
        assert (
            hash_outcome("exec_command", {}, result=out1).hash
            == hash_outcome("exec_command", {}, result=out2).hash
        )
        p1 = {"status": "running", "stdout": "", "timestamp": "2026-01-01T00:00:00Z"}
        p2 = {**p1, "timestamp": "2026-01-01T00:00:05Z"}
        assert (
            hash_outcome("BashOutput", {}, result=p1).hash
            == hash_outcome("BashOutput", {}, result=p2).hash
        )

    def test_never_raises(self) -> None:
        """Outcome hashing survives hostile results."""

        class Hostile:
            def __getattr__(self, name: str) -> Any:
                raise RuntimeError("no")

            def __str__(self) -> str:
                raise RuntimeError("no str")

        for value in (Hostile(), {"content": [Hostile()], "details": {"x": Hostile()}}):
            assert hash_outcome("t", {}, result=value).hash is not None
        assert hash_outcome("t", {}, error=Hostile()).hash is not None
        assert hash_outcome("t", {}, error=ValueError(Hostile())).hash is not None


class TestKnownPoll:
    def test_poll_tools(self) -> None:
        assert is_known_poll("command_status", {})
        assert is_known_poll("process", {"action": "poll"})
        assert is_known_poll("process", {"action": "log"})
        assert not is_known_poll("process", {"action": "kill"})
        assert not is_known_poll("process", "poll")
        assert not is_known_poll("read", {"action": "poll"})
        assert is_known_poll("BashOutput", {})


class TestToolOutcome:
    """The typed outcome integrations pass hashes as the shapes it replaces."""

    def test_content_alone_is_the_plain_result(self) -> None:
        for content in ("pending", [{"type": "text", "text": "a"}], {"k": 1}, 3):
            assert hash_outcome("t", {}, result=ToolOutcome(content)) == hash_outcome(
                "t", {}, result=content
            )

    def test_content_with_details_is_the_tool_result_shape(self) -> None:
        for tool, details in (("t", {"rows": 3}), ("exec", {"status": "running", "tail": "x"})):
            shaped = {"content": "done", "details": details}
            assert hash_outcome(tool, {}, result=ToolOutcome("done", details)) == hash_outcome(
                tool, {}, result=shaped
            )

    def test_error_is_the_error(self) -> None:
        typed = hash_outcome("t", {}, result=ToolOutcome(error="backend down"))
        assert typed == hash_outcome("t", {}, error="backend down")
        assert typed.is_error and typed.unknown_tool_name is None

    def test_unknown_tool_is_said_not_parsed(self) -> None:
        """A wording no pattern knows still counts as an unknown tool when the adapter says so."""
        text = "Sorry, nothing answers to that name."
        assert hash_outcome("t", {}, error=text).unknown_tool_name is None
        typed = hash_outcome("t", {}, result=ToolOutcome(error=text, unknown_tool="Fetch_Docs"))
        assert (typed.hash, typed.is_error) == (hash_outcome("t", {}, error=text).hash, True)
        assert typed.unknown_tool_name == "fetch_docs"

    def test_nothing_to_record(self) -> None:
        assert hash_outcome("t", {}, result=ToolOutcome()).hash is None
