"""Config files: a key written twice is refused, and a large plain-JSON file loads fast.

Issue 24, items 11 and 12. Both go through the public entry points
(``load_config``, ``LoopGuard``, ``loopwarden config check`` and the hook
command); duplicate keys are found on the fast strict-JSON path and the JSON5
path alike, each reported with the path and ``file:line`` of both copies.
"""

from __future__ import annotations

import time
from pathlib import Path

import orjson
import pytest

import loopwarden as lw
from tests.adversarial._procs import LOOPWARDEN, run_bounded
from tests.adversarial.conftest import claude_event, hook

pytestmark = pytest.mark.timeout(180)

# (id, text, path of the repeated key, its two lines); a "//" comment makes it JSON5.
DUPLICATES = [
    (
        "failMode",
        '{\n  "loopwarden": {\n    "failMode": "closed",\n    "failMode": "open"\n  }\n}\n',
        "loopwarden.failMode",
        (3, 4),
    ),
    (
        "threshold",
        '{"tools": {"loopDetection": {\n  "enabled": true,\n  "warningThreshold": 3,\n'
        '  "criticalThreshold": 9,\n  "warningThreshold": 30\n}}}\n',
        "tools.loopDetection.warningThreshold",
        (3, 5),
    ),
    (
        "agent-block",
        '{"agents": {"list": [\n  {"id": "ops", "tools": {"loopDetection": {\n'
        '    "enabled": true,\n    "enabled": false}}}\n]}}\n',
        "agents.list[0].tools.loopDetection.enabled",
        (3, 4),
    ),
    (
        "whole-block",
        '{\n  "tools": {"loopDetection": {"enabled": true}},\n  "agents": {},\n'
        '  "tools": {"loopDetection": {"enabled": false}}\n}\n',
        "tools",
        (2, 4),
    ),
    (
        "rule-section",
        '{"loopwarden": {"consecutiveRepeat": {\n  "warnAt": 3,\n  "warnAt": 4\n}}}\n',
        "loopwarden.consecutiveRepeat.warnAt",
        (2, 3),
    ),
]


def _write(folder: Path, text: str, json5: bool) -> Path:
    path = folder / ("config.json5" if json5 else "config.json")
    path.write_text(f"// a JSON5 comment\n{text}" if json5 else text)
    return path


@pytest.mark.parametrize("json5", [False, True], ids=["json", "json5"])
@pytest.mark.parametrize(
    ("text", "key", "lines"), [d[1:] for d in DUPLICATES], ids=[d[0] for d in DUPLICATES]
)
def test_duplicate_key_is_refused_with_both_lines(
    tmp_path: Path, text: str, key: str, lines: tuple[int, int], json5: bool
) -> None:
    """A key written twice in what loopwarden reads is a ConfigError naming the key's path
    and the file:line of both copies (LoopGuard and ``config check`` alike)."""
    path = _write(tmp_path, text, json5)
    first, second = (line + json5 for line in lines)
    with pytest.raises(lw.ConfigError) as raised:
        lw.LoopGuard(path)
    message = str(raised.value)
    assert key in message, message
    assert f"{path}:{first}" in message and f"{path}:{second}" in message, message
    ran = run_bounded([LOOPWARDEN, "config", "check", str(path), "--format", "json"])
    assert ran.code == 1, ran.out + ran.err
    problems = orjson.loads(ran.stdout)["problems"]
    assert [(p["path"], p["line"]) for p in problems] == [(key, second)], problems


def test_duplicate_fail_mode_in_a_hook_is_refused_closed(hook_env: dict[str, str]) -> None:
    """``failMode: 'closed'`` then ``'open'``: the hook refuses the config, and since one copy
    says closed, it denies the call and says why on stderr."""
    path = Path(hook_env["HOME"]) / ".config" / "loopwarden" / "config.json"
    path.parent.mkdir(parents=True)
    path.write_text(DUPLICATES[0][1])
    answer = hook(hook_env, "claude-code", claude_event("PreToolUse", 1))
    assert answer.code == 0
    assert answer.denied, answer.json
    assert "loopwarden.failMode" in answer.stderr and f"{path}:3" in answer.stderr


@pytest.mark.parametrize("json5", [False, True], ids=["json", "json5"])
def test_duplicates_outside_loopwardens_keys_are_left_alone(tmp_path: Path, json5: bool) -> None:
    """A key repeated in a part of an openclaw.json loopwarden does not read (OpenClaw's own
    settings, an agent's model) does not make the config invalid."""
    text = (
        '{"gateway": {"port": 1, "port": 2},\n'
        ' "agents": {"list": [{"id": "ops", "model": "a", "model": "b",\n'
        '   "tools": {"allow": ["x"], "allow": ["y"], "loopDetection": {"enabled": true}}}]},\n'
        ' "tools": {"loopDetection": {"enabled": true}}}\n'
    )
    config = lw.load_config(_write(tmp_path, text, json5))
    assert config.for_agent("ops").enabled is True


# -- item 12: a large plain-JSON config ----------------------------------------------------
def big_config(agents: int = 6000, *, extra: str = "") -> str:
    """An openclaw.json of about 1 MB: many agents with OpenClaw's own keys, then ``extra``
    inside the loopwarden block (at the end of the file)."""
    listed = [
        {"id": f"agent-{n}", "model": "m" * 40, "tools": {"allow": ["read", "write", "exec"]}}
        for n in range(agents)
    ]
    body = orjson.dumps(
        {"agents": {"list": listed}, "tools": {"loopDetection": {"enabled": True}}},
        option=orjson.OPT_INDENT_2,
    ).decode()
    return body[:-2] + f',\n  "loopwarden": {{\n    "failMode": "open"{extra}\n  }}\n}}\n'


def cpu(fn: object) -> float:
    """CPU seconds this process spends in ``fn()`` (not wall time: the machine is shared)."""
    start = time.process_time()
    fn()  # type: ignore[operator]
    return time.process_time() - start


def test_large_plain_json_config_loads_fast(tmp_path: Path) -> None:
    """A 1 MB plain-JSON config is parsed by a strict JSON parser, not the pure-Python
    JSON5 one: well under a CPU second (it took 8.4 s), with the same result."""
    path = tmp_path / "openclaw.json"
    path.write_text(big_config())
    assert path.stat().st_size > 1_000_000
    loaded: list[lw.Config] = []
    spent = cpu(lambda: loaded.append(lw.load_config(path)))
    assert spent < 2.0, f"{spent:.2f} CPU seconds to load a 1 MB JSON config"
    assert len(loaded[0].listed_agents()) == 6000
    assert loaded[0].for_agent("agent-5").enabled is True


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (',\n    "failMode": "closed"', "loopwarden.failMode: the key is written more than once"),
        (',\n    "failMod": "closed"', "loopwarden.failMod: unknown key"),
    ],
    ids=["duplicate", "misspelt"],
)
def test_large_plain_json_config_errors_keep_their_lines(
    tmp_path: Path, extra: str, says: str
) -> None:
    """On the fast path a duplicate key is still found, and errors still carry the line of
    the key near the end of a 1 MB file, in bounded CPU."""
    text = big_config(extra=extra)
    path = tmp_path / "openclaw.json"
    path.write_text(text)
    line = text.count("\n", 0, text.index(extra.strip(",\n "))) + 1
    errors: list[lw.ConfigError] = []

    def load() -> None:
        try:
            lw.load_config(path)
        except lw.ConfigError as exc:
            errors.append(exc)

    spent = cpu(load)
    assert errors, "the config was accepted"
    assert f"{path}:{line}: {says}" in str(errors[0]), str(errors[0])
    assert spent < 4.0, f"{spent:.2f} CPU seconds to report one problem"
