"""Hostile config files: a clear ConfigError (or exit code) every time, fail-closed honoured.

Issue 11, defects 9, 14, 15 and 22. Documented exit codes: ``config check`` 0
valid, 1 invalid, 2 usage; ``replay`` and ``mcp-proxy`` 2 for a bad config; 70
means "internal error" and is never a right answer.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

import loopwarden as lw
from tests.adversarial import _traces as traces
from tests.adversarial._procs import LOOPWARDEN, Ran, run_bounded
from tests.adversarial._values import examples
from tests.adversarial.conftest import claude_event, gemini_event, hook, write_config

pytestmark = pytest.mark.timeout(120)
DEPTH = 100  # well past json5's recursion limit (59 levels at the top of a stack)


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def deep_config(depth: int = DEPTH, **settings: Any) -> bytes:
    """Plain JSON with a deeply nested value where a boolean belongs (an error either way)."""
    head = orjson.dumps({"loopwarden": settings})[:-1] if settings else b"{"
    sep = b"," if settings else b""
    return (
        head
        + sep
        + b'"tools": {"loopDetection": {"enabled": true, "detectors": {"genericRepeat": '
        + nested(depth).encode()
        + b"}}}}"
    )


def cli(*args: str) -> Ran:
    ran = run_bounded([LOOPWARDEN, *args], timeout=60)
    assert not ran.timed_out
    return ran


# -- defect 9: fail-closed with a broken config ------------------------------------------------
CLOSED_MISTAKE = {
    "tools": {"loopDetection": {"enabled": True, "warningTreshold": 3}},
    "loopwarden": {"failMode": "closed"},
}


@pytest.mark.parametrize("agent", ["claude-code", "gemini"])
def test_fail_closed_config_with_a_mistake_denies(hook_env: dict[str, str], agent: str) -> None:
    """A config with a mistake that says ``failMode: "closed"`` denies calls, as documented."""
    write_config(hook_env, CLOSED_MISTAKE)
    event = claude_event("PreToolUse", 1) if agent == "claude-code" else gemini_event("BeforeTool")
    answer = hook(hook_env, agent, event)
    assert answer.code == 0
    assert answer.denied, answer.json
    assert "warningTreshold" in answer.stderr


def test_fail_closed_deeply_nested_config_denies(hook_env: dict[str, str]) -> None:
    """A fail-closed JSON config with a 100-level nested value is a config error that denies."""
    write_config(hook_env, deep_config(failMode="closed"))
    answer = hook(hook_env, "claude-code", claude_event("PreToolUse", 1))
    assert answer.code == 0
    assert answer.denied, answer.json
    assert "internal error" not in answer.stderr


def test_fail_closed_config_with_a_bad_store_url_denies(hook_env: dict[str, str]) -> None:
    """A valid file whose store URL is malformed, with ``failMode: "closed"``, denies too."""
    write_config(hook_env, {"loopwarden": {"failMode": "closed", "store": "sqlite://x?bogus=1"}})
    answer = hook(hook_env, "claude-code", claude_event("PreToolUse", 1))
    assert answer.code == 0
    assert answer.denied, answer.json
    assert "bogus" in answer.stderr


def test_fail_open_config_with_a_mistake_allows_and_says_so(hook_env: dict[str, str]) -> None:
    """The default (fail-open) allows, and names the mistake on stderr."""
    write_config(hook_env, {"tools": {"loopDetection": {"warningTreshold": 3}}})
    answer = hook(hook_env, "claude-code", claude_event("PreToolUse", 1))
    assert (answer.code, answer.json) == (0, {})
    assert "warningTreshold" in answer.stderr


# -- defect 14: deep nesting --------------------------------------------------------------------
def test_deeply_nested_config_file_is_a_config_error(tmp_path: Path) -> None:
    """``load_config`` and ``LoopGuard`` raise ConfigError (not RecursionError) for 100 levels."""
    path = tmp_path / "deep.json"
    path.write_bytes(deep_config())
    with pytest.raises(lw.ConfigError):
        lw.load_config(path)
    with pytest.raises(lw.ConfigError):
        lw.LoopGuard(path)


@pytest.mark.parametrize("suffix", [".json", ".json5"])
def test_deeply_nested_config_in_any_position_is_a_config_error(
    tmp_path: Path, suffix: str
) -> None:
    """Nesting under a key loopwarden ignores is refused the same way (JSON and JSON5)."""
    path = tmp_path / f"deep{suffix}"
    path.write_text('{"tools": {"loopDetection": {}}, "gateway": ' + nested(DEPTH) + "}")
    with pytest.raises(lw.ConfigError):
        lw.load_config(path)


@pytest.mark.parametrize(
    ("command", "code"),
    [(("config", "check"), 1), (("replay", "--config"), 2), (("mcp-proxy", "--config"), 2)],
    ids=["config-check", "replay", "mcp-proxy"],
)
def test_deeply_nested_config_exit_codes(
    tmp_path: Path, command: tuple[str, ...], code: int
) -> None:
    """Every command refuses a 100-level nested config with its config-error exit code."""
    path = tmp_path / "deep.json"
    path.write_bytes(deep_config())
    trace = traces.write(tmp_path / "t.jsonl", "loopwarden", [("t", {}, "x")])
    tail = {"replay": (str(trace),), "mcp-proxy": ("--", "true")}.get(command[0], ())
    ran = cli(*command, str(path), *tail)
    assert ran.code == code, ran.err
    assert "Traceback" not in ran.err and "internal error" not in ran.err


# -- defect 15: out-of-range numbers ------------------------------------------------------------
FIELDS = [
    "historySize",
    "warningThreshold",
    "criticalThreshold",
    "unknownToolThreshold",
    "globalCircuitBreakerThreshold",
]


@pytest.mark.parametrize("value", [1e20, 10**20, 2**63], ids=["1e20", "10**20", "2**63"])
@pytest.mark.parametrize("field", FIELDS)
def test_absurd_numbers_are_config_errors(field: str, value: Any) -> None:
    """Integers beyond any sane bound are rejected with a ConfigError naming the field."""
    with pytest.raises(lw.ConfigError, match=field):
        lw.load_config({"tools": {"loopDetection": {field: value}}})


@pytest.mark.parametrize(
    ("command", "code"),
    [(("config", "check"), 1), (("replay", "--config"), 2)],
    ids=["config-check", "replay"],
)
def test_absurd_numbers_exit_codes(tmp_path: Path, command: tuple[str, ...], code: int) -> None:
    """``historySize: 1e20`` is refused with the config-error exit code, also in JSON output."""
    path = tmp_path / "huge.json"
    path.write_text('{"tools": {"loopDetection": {"enabled": true, "historySize": 1e20}}}')
    trace = traces.write(tmp_path / "t.jsonl", "loopwarden", [("t", {}, "x")])
    tail = (str(trace),) if command[0] == "replay" else ()
    ran = cli(*command, str(path), *tail, "--format", "json")
    assert ran.code == code, ran.err
    assert "historySize" in ran.out + ran.err


# -- defect 22: cosmetic messages ------------------------------------------------------------------
def test_unknown_key_message_reads_well() -> None:
    """Without a suggestion, the message still separates "unknown key" from the allowed keys."""
    with pytest.raises(lw.ConfigError) as raised:
        lw.load_config({"tools": {"loopDetection": {"qqqqqq": 1}}})
    assert re.search(r"unknown key[.;:,]", str(raised.value)), str(raised.value)


def test_integer_mapping_keys_are_not_shown_as_list_indexes() -> None:
    """An integer key in a mapping is not rendered as ``[1]`` (that reads as a list index)."""
    with pytest.raises(lw.ConfigError) as raised:
        lw.load_config({"tools": {"loopDetection": {"detectors": {1: True}}}})
    assert "detectors[1]" not in str(raised.value), str(raised.value)


@pytest.mark.parametrize("text", ["null", "  null  \n", "// nothing\nnull"])
def test_config_file_holding_null_is_an_error(tmp_path: Path, text: str) -> None:
    """A config file whose whole content is ``null`` is an error, not the defaults."""
    path = tmp_path / "config.json5"
    path.write_text(text)
    with pytest.raises(lw.ConfigError):
        lw.load_config(path)


def test_install_does_not_drop_duplicate_settings_keys(tmp_path: Path) -> None:
    """A settings.json with a duplicate key is not silently rewritten without one of them."""
    home = tmp_path / "home"
    settings = home / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True)
    first = '{"matcher": "Bash", "hooks": [{"type": "command", "command": "guard-a"}]}'
    second = '{"hooks": [{"type": "command", "command": "notify"}]}'
    original = f'{{"hooks": {{"PreToolUse": [{first}]}}, "hooks": {{"Stop": [{second}]}}}}'
    settings.write_text(original)
    ran = run_bounded(
        [LOOPWARDEN, "install", "claude-code"], env={"HOME": str(home), "PATH": "/usr/bin:/bin"}
    )
    # Refused with the key and its line, and the file is left exactly as it was.
    assert ran.code == 1, ran.out + ran.err
    assert "settings.json:1: the key 'hooks' appears more than once" in ran.err, ran.err
    assert "Traceback" not in ran.err
    assert settings.read_text() == original


# -- hypothesis: hostile config values ------------------------------------------------------------
_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.floats(allow_nan=False, allow_infinity=False, min_value=-1e6, max_value=1e6)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
_BLOCK_KEYS = st.sampled_from(
    [*FIELDS, "enabled", "detectors", "postCompactionGuard", "historysize", "x"]
)
_SETTING_KEYS = st.sampled_from(
    [
        "sendTools",
        "outcomeProfiles",
        "store",
        "failMode",
        "runRecord",
        "logParams",
        "stateTtlSeconds",
    ]
)


@st.composite
def hostile_configs(draw: st.DrawFn) -> Any:
    block = draw(st.dictionaries(_BLOCK_KEYS, _JSON, max_size=4))
    settings = draw(st.dictionaries(_SETTING_KEYS, _JSON, max_size=3))
    settings.pop("store", None)  # a store URL would be opened: not this test's subject
    settings.pop("runRecord", None)
    agents = draw(
        st.lists(
            st.fixed_dictionaries(
                {
                    "id": _JSON,
                    "tools": st.fixed_dictionaries({"loopDetection": _JSON | st.just(block)}),
                }
            ),
            max_size=2,
        )
    )
    return draw(
        st.sampled_from(
            [
                {"tools": {"loopDetection": block}, "loopwarden": settings},
                {"tools": {"loopDetection": block}, "agents": {"list": agents}},
                {"agents": {"entries": {"a": {"tools": {"loopDetection": block}}}}},
                block,
                [block],
            ]
        )
    )


@examples(150)
@given(hostile_configs(), st.sampled_from([".json", ".json5"]))
def test_hostile_configs_load_or_raise_config_error(config: Any, suffix: str) -> None:
    """A hostile config either loads (and then guards a call) or raises ConfigError."""
    import tempfile

    with tempfile.NamedTemporaryFile("wb", suffix=suffix) as fh:
        fh.write(orjson.dumps(config))
        fh.flush()
        try:
            loaded = lw.load_config(fh.name)
        except lw.ConfigError as exc:
            assert str(exc)
            return
    guard = lw.LoopGuard(loaded)
    for agent in [None, *loaded.agent_ids()]:
        run = guard.run("r", agent_id=agent)
        assert run.before_call("tool", {"a": 1}, call_id="c").allowed
        assert run.after_call("tool", {"a": 1}, call_id="c", result="ok") is None


NASTY_FILES = {
    "empty": b"",
    "binary": b"\xff\xfe\x00\x01",
    "not-utf8": b'{"tools": {"loopDetection": {"enabled": "\xff"}}}',
    "json5-comments": b"// c\n{tools: {loopDetection: {enabled: true,},},}",
    "array": b"[1, 2, 3]",
    "string": b'"hello"',
    "unterminated": b'{"tools": {"loopDetection": {',
    "wrong-types": b'{"tools": {"loopDetection": {"enabled": "yes", "historySize": -3}}}',
    "infinity": b"{tools: {loopDetection: {historySize: Infinity}}}",
    "nan": b"{tools: {loopDetection: {historySize: NaN}}}",
    "bom": b'\xef\xbb\xbf{"tools": {"loopDetection": {"enabled": true}}}',
}


@pytest.mark.parametrize("name", sorted(NASTY_FILES))
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_config_check_on_nasty_files(tmp_path: Path, name: str, fmt: str) -> None:
    """``config check`` answers 0 or 1 with no traceback; JSON output is valid JSON."""
    path = tmp_path / "config.json5"
    path.write_bytes(NASTY_FILES[name])
    ran = cli("config", "check", str(path), "--format", fmt)
    assert ran.code in (0, 1), ran.err
    assert "Traceback" not in ran.err and "internal error" not in ran.err
    if fmt == "json":
        assert isinstance(orjson.loads(ran.stdout), dict)
