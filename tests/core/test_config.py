"""Configuration: defaults, validation, repair, per-agent merge (SPEC section 1)."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import json5
import pytest

import loopwarden as lw
from loopwarden.config import FieldView, normalize_agent_id


def issues_of(exc: pytest.ExceptionInfo[lw.ConfigError]) -> list[str]:
    return [str(issue) for issue in exc.value.issues]


class TestDefaults:
    def test_every_field_has_its_default(self) -> None:
        """An empty block has OpenClaw's defaults, and so does a missing config."""
        cfg = lw.LoopDetectionConfig.from_dict({})
        assert cfg.enabled is None
        assert (cfg.history_size, cfg.warning_threshold, cfg.critical_threshold) == (30, 10, 20)
        assert (cfg.global_circuit_breaker_threshold, cfg.unknown_tool_threshold) == (30, 10)
        assert (
            cfg.detectors.generic_repeat
            and cfg.detectors.known_poll_no_progress
            and cfg.detectors.ping_pong
        )
        assert cfg.post_compaction_guard.window_size == 3
        assert lw.resolve_config(None, None) == cfg
        assert lw.resolve_config({}, "anyone") == cfg

    def test_to_dict_round_trip(self) -> None:
        """The camelCase form of a config builds the same config again."""
        block = {"enabled": True, "historySize": 50, "detectors": {"pingPong": False}}
        cfg = lw.LoopDetectionConfig.from_dict(block)
        assert lw.LoopDetectionConfig.from_dict(cfg.to_dict()) == cfg
        assert cfg.to_dict()["detectors"] == {
            "genericRepeat": True,
            "knownPollNoProgress": True,
            "pingPong": False,
        }

    def test_null_counts_as_unset_and_integral_floats_are_ints(self) -> None:
        """null means unset, and 5.0 is accepted as the integer 5."""
        cfg = lw.LoopDetectionConfig.from_dict(
            {
                "enabled": None,
                "historySize": 5.0,
                "detectors": {"pingPong": None},
                "postCompactionGuard": None,
            }
        )
        assert cfg.enabled is None and cfg.history_size == 5 and isinstance(cfg.history_size, int)
        assert cfg.detectors.ping_pong is True


class TestValidation:
    def test_unknown_key_with_suggestion(self) -> None:
        """A misspelt key is reported with its path and the key it probably meant."""
        with pytest.raises(lw.ConfigError) as exc:
            lw.LoopDetectionConfig.from_dict({"warningTreshold": 5})
        (issue,) = exc.value.issues
        assert issue.path == "tools.loopDetection.warningTreshold"
        assert "did you mean 'warningThreshold'" in issue.message

    @pytest.mark.parametrize(
        ("block", "path", "found"),
        [
            ({"historySize": 0}, "tools.loopDetection.historySize", "0"),
            ({"historySize": -3}, "tools.loopDetection.historySize", "-3"),
            ({"warningThreshold": 2.5}, "tools.loopDetection.warningThreshold", "2.5"),
            ({"criticalThreshold": "20"}, "tools.loopDetection.criticalThreshold", "'20'"),
            ({"unknownToolThreshold": True}, "tools.loopDetection.unknownToolThreshold", "True"),
            ({"enabled": "yes"}, "tools.loopDetection.enabled", "'yes'"),
            ({"detectors": {"pingPong": 1}}, "tools.loopDetection.detectors.pingPong", "1"),
            ({"detectors": []}, "tools.loopDetection.detectors", "list"),
            (
                {"postCompactionGuard": {"windowSize": 0}},
                "tools.loopDetection.postCompactionGuard.windowSize",
                "0",
            ),
            (
                {"postCompactionGuard": {"window": 2}},
                "tools.loopDetection.postCompactionGuard.window",
                "window",
            ),
        ],
    )
    def test_wrong_values_name_their_path(
        self, block: dict[str, Any], path: str, found: str
    ) -> None:
        """Each wrong value is reported with its full path and what was found."""
        with pytest.raises(lw.ConfigError) as exc:
            lw.LoopDetectionConfig.from_dict(block)
        (issue,) = exc.value.issues
        assert issue.path == path
        assert found in issue.message or found in issue.path

    def test_all_problems_are_reported_at_once(self) -> None:
        """Every problem of a config is listed in one error, in file order."""
        with pytest.raises(lw.ConfigError) as exc:
            lw.resolve_config(
                {
                    "tools": {"loopDetection": {"historySize": 0, "bogus": 1}},
                    "agents": {
                        "list": [
                            {"id": "a"},
                            {"id": "b", "tools": {"loopDetection": {"enabled": 3}}},
                        ]
                    },
                },
                None,
            )
        paths = [issue.path for issue in exc.value.issues]
        assert paths == [
            "tools.loopDetection.historySize",
            "tools.loopDetection.bogus",
            "agents.list[1].tools.loopDetection.enabled",
        ]
        assert "3 problems" in str(exc.value)

    def test_direct_construction_is_validated(self) -> None:
        """A hand-built config is validated like a loaded one."""
        with pytest.raises(lw.ConfigError):
            lw.LoopDetectionConfig(history_size=0)
        with pytest.raises(lw.ConfigError):
            lw.LoopDetectionConfig(enabled="yes")  # type: ignore[arg-type]

    def test_loop_detection_fields_at_the_top_level_are_an_error(self) -> None:
        """Block fields at the top level are an error that says where they belong."""
        with pytest.raises(lw.ConfigError) as exc:
            lw.load_config({"enabled": True})
        assert "tools.loopDetection" in str(exc.value)

    @pytest.mark.parametrize(
        ("key", "name", "near"),
        [
            ("loopDetecton", "loopDetection", True),
            ("loop_detection", "loopDetection", True),
            ("toolLoopDetection", "loopDetection", True),
            ("Tools", "tools", True),
            ("tool", "tools", True),
            ("agnets", "agents", True),
            ("entry", "entries", True),
            ("entires", "entries", True),
            ("lists", "list", True),
            ("loop-warden", "loopwarden", True),
            ("tools", "tools", False),
            ("tooling", "tools", False),
            ("hooks", "tools", False),
            ("talk", "tools", False),
            ("models", "agents", False),
            ("defaults", "list", False),
            (3, "tools", False),
            ("x" * 100, "loopDetection", False),
        ],
    )
    def test_near_misses(self, key: Any, name: str, near: bool) -> None:
        """A misspelling is one or two edits away, or differs in case, separators or plural."""
        from loopwarden.config.names import is_near_miss

        assert is_near_miss(key, name) is near

    def test_misspelt_names_of_the_block_and_its_parents(self) -> None:
        """Every misspelt name on the way to a block is reported at once, with its fix."""
        with pytest.raises(lw.ConfigError) as exc:
            lw.load_config(
                {
                    "Tools": {"loopDetection": {"enabled": True}},
                    "loopDetection": {"enabled": True},
                    "agents": {
                        "list": [{"id": "a", "tool": {"loopDetection": {}}}],
                        "entries": {"b": {"tools": {"loopdetection": {}}}},
                    },
                }
            )
        assert {issue.path for issue in exc.value.issues} == {
            "Tools",
            "loopDetection",
            "agents.list[0].tool",
            "agents.entries.b.tools.loopdetection",
        }
        with pytest.raises(lw.ConfigError, match="did you mean 'loopDetection'"):
            lw.LoopGuard({"tools": {"loopDetecton": {"enabled": True}}})

    def test_other_openclaw_keys_are_ignored(self) -> None:
        """The rest of an openclaw.json is left alone."""
        cfg = lw.load_config(
            {"gateway": {"port": 1}, "models": [], "tools": {"exec": {}, "loopDetection": {}}}
        )
        assert cfg.for_agent(None) == lw.LoopDetectionConfig()

    def test_loopwarden_settings(self) -> None:
        """The top-level loopwarden block sets loopwarden's own settings."""
        cfg = lw.load_config(
            {
                "loopwarden": {
                    "sendTools": ["slack_post"],
                    "outcomeProfiles": {"deploy": {"volatileKeys": ["requestId"], "poll": True}},
                    "store": "memory://",
                    "failMode": "closed",
                    "logParams": True,
                    "stateTtlSeconds": 60,
                }
            }
        )
        settings = cfg.settings
        assert settings.send_tools == frozenset({"slack_post"})
        assert settings.outcome_profiles["deploy"].poll
        assert settings.fail_mode == "closed" and settings.log_params
        assert settings.state_ttl_seconds == 60.0
        registry = settings.profile_registry()
        assert "slack_post" in registry.send_tools and registry.get("Bash") is not None

    def test_loopwarden_settings_errors(self) -> None:
        """Mistakes in the loopwarden block are reported with their paths."""
        with pytest.raises(lw.ConfigError) as exc:
            lw.load_config(
                {
                    "loopwarden": {
                        "failmode": "open",
                        "failMode": "sometimes",
                        "outcomeProfiles": {"t": {"volatilePatterns": ["("]}},
                        "sendTools": "x",
                    }
                }
            )
        text = "\n".join(issues_of(exc))
        assert "loopwarden.failmode" in text and "did you mean 'failMode'" in text
        assert "loopwarden.failMode" in text and "'open' or 'closed'" in text
        assert "loopwarden.outcomeProfiles.t.volatilePatterns[0]" in text
        assert "loopwarden.sendTools" in text


class TestRepair:
    def test_critical_and_breaker_are_lifted(self, lw_logs: pytest.LogCaptureFixture) -> None:
        """Thresholds out of order are raised to keep warning < critical < breaker, and logged."""
        cfg = lw.LoopDetectionConfig.from_dict(
            {"warningThreshold": 2, "criticalThreshold": 2, "globalCircuitBreakerThreshold": 3}
        )
        assert (
            cfg.warning_threshold,
            cfg.critical_threshold,
            cfg.global_circuit_breaker_threshold,
        ) == (2, 3, 4)
        assert len(cfg.repairs) == 2
        assert cfg.source_of("criticalThreshold") == "repair"
        messages = [r.getMessage() for r in lw_logs.records if r.levelno == logging.WARNING]
        assert any("criticalThreshold 2" in m for m in messages)
        assert any("globalCircuitBreakerThreshold 3" in m for m in messages)

    def test_repair_is_logged_once(self, lw_logs: pytest.LogCaptureFixture) -> None:
        """A config logs each distinct repair once, however many agents and runs use it."""
        config = lw.load_config(
            {
                "tools": {"loopDetection": {"warningThreshold": 41, "criticalThreshold": 7}},
                "agents": {"list": [{"id": "a", "tools": {"loopDetection": {"historySize": 5}}}]},
            }
        )
        for agent in (None, "a", "b", None, "a"):
            assert config.for_agent(agent).critical_threshold == 42
        guard = lw.LoopGuard(config)
        guard.run(agent_id="a")
        guard.run(agent_id="c")
        repaired = [r for r in lw_logs.records if "criticalThreshold 7" in r.getMessage()]
        assert len(repaired) == 1

    def test_direct_construction_repairs_without_logging(
        self, lw_logs: pytest.LogCaptureFixture
    ) -> None:
        """A hand-built config records its repairs; the guard that adopts it logs them."""
        cfg = lw.LoopDetectionConfig(warning_threshold=5, critical_threshold=5)
        assert cfg.critical_threshold == 6 and len(cfg.repairs) == 1
        assert lw_logs.records == []
        lw.LoopGuard(cfg)
        assert ["criticalThreshold 5" in r.getMessage() for r in lw_logs.records] == [True]

    def test_repair_runs_on_the_merged_result(self) -> None:
        """Repair looks at the merged block, not at each side alone."""
        full = {
            "tools": {"loopDetection": {"warningThreshold": 15}},
            "agents": {
                "list": [{"id": "a", "tools": {"loopDetection": {"criticalThreshold": 12}}}]
            },
        }
        cfg = lw.resolve_config(full, "a")
        assert (
            cfg.warning_threshold,
            cfg.critical_threshold,
            cfg.global_circuit_breaker_threshold,
        ) == (15, 16, 30)

    def test_unknown_tool_threshold_has_no_ordering_rule(self) -> None:
        """unknownToolThreshold may be any positive value."""
        cfg = lw.LoopDetectionConfig.from_dict({"unknownToolThreshold": 99})
        assert cfg.unknown_tool_threshold == 99 and not cfg.repairs


class TestAgents:
    GLOBAL = {"enabled": True, "warningThreshold": 5, "detectors": {"pingPong": False}}

    def test_field_by_field_merge(self) -> None:
        """Reference scenario 6.6.1."""
        full = {
            "tools": {"loopDetection": self.GLOBAL},
            "agents": {
                "list": [
                    {
                        "id": "safe-runner",
                        "tools": {
                            "loopDetection": {
                                "criticalThreshold": 8,
                                "detectors": {"genericRepeat": False},
                            }
                        },
                    }
                ]
            },
        }
        cfg = lw.resolve_config(full, "safe-runner")
        assert cfg.enabled is True and cfg.warning_threshold == 5 and cfg.critical_threshold == 8
        assert cfg.detectors.ping_pong is False and cfg.detectors.generic_repeat is False
        assert cfg.detectors.known_poll_no_progress is True
        assert cfg.source_of("warningThreshold") == "global"
        assert cfg.source_of("criticalThreshold") == "agent"
        assert cfg.source_of("detectors.genericRepeat") == "agent"
        assert cfg.source_of("historySize") == "default"
        assert lw.resolve_config(full, "someone-else").critical_threshold == 20

    def test_agent_false_wins(self) -> None:
        """Reference scenario 6.6.2."""
        full = {
            "tools": {"loopDetection": {"enabled": True}},
            "agents": {"list": [{"id": "quiet", "tools": {"loopDetection": {"enabled": False}}}]},
        }
        assert lw.resolve_config(full, "quiet").enabled is False

    def test_only_one_side(self) -> None:
        """Reference scenario 6.6.3."""
        only_agent = {
            "agents": {"list": [{"id": "a", "tools": {"loopDetection": {"historySize": 7}}}]}
        }
        assert lw.resolve_config(only_agent, "a").history_size == 7
        assert lw.resolve_config(only_agent, None).history_size == 30
        only_global = {"tools": {"loopDetection": {"historySize": 9}}}
        assert lw.resolve_config(only_global, "a").history_size == 9

    def test_agent_null_does_not_clear_global(self) -> None:
        """An agent's null leaves the global value in place."""
        full = {
            "tools": {"loopDetection": {"enabled": True}},
            "agents": {"list": [{"id": "a", "tools": {"loopDetection": {"enabled": None}}}]},
        }
        assert lw.resolve_config(full, "a").enabled is True

    def test_entries_layout_and_id_normalisation(self) -> None:
        """agents.entries works too, and agent ids match after normalisation."""
        full = {
            "agents": {
                "entries": {"Research Bot": {"tools": {"loopDetection": {"historySize": 11}}}}
            }
        }
        assert lw.resolve_config(full, " research  bot ").history_size == 11
        assert lw.resolve_config(full, "RESEARCH-BOT").history_size == 11
        cfg = lw.load_config(full)
        assert cfg.agent_ids() == ["research-bot"]

    def test_duplicate_agents_are_an_error(self) -> None:
        """Two blocks for one agent are an error naming the first one."""
        full = {
            "agents": {
                "list": [{"id": "a", "tools": {"loopDetection": {}}}],
                "entries": {"A": {"tools": {"loopDetection": {}}}},
            }
        }
        with pytest.raises(lw.ConfigError) as exc:
            lw.load_config(full)
        assert "already has a loopDetection block" in str(exc.value)

    def test_agent_without_id(self) -> None:
        """An agent block needs an id; agents without a block are not checked."""
        with pytest.raises(lw.ConfigError) as exc:
            lw.load_config({"agents": {"list": [{"tools": {"loopDetection": {"enabled": True}}}]}})
        assert exc.value.issues[0].path == "agents.list[0].id"
        # agents without a loopDetection block are not ours to check
        assert lw.load_config({"agents": {"list": [{"name": "no id, no block"}]}}).agent_ids() == []

    @pytest.mark.parametrize(
        ("raw", "expected"),
        [
            ("Main", "main"),
            ("", "main"),
            ("   ", "main"),
            (None, "main"),
            ("Safe Runner!", "safe-runner"),
            ("--a--b--", "a--b"),
            ("ü-ber", "ber"),
            ("x" * 80, "x" * 64),
            ("agent_1-ok", "agent_1-ok"),
        ],
    )
    def test_normalize_agent_id(self, raw: Any, expected: str) -> None:
        """Agent ids normalise the way OpenClaw compares them."""
        assert normalize_agent_id(raw) == expected


class TestFiles:
    def test_openclaw_json5_file_loads(self, tmp_path: Path) -> None:
        """A JSON5 openclaw.json with comments and trailing commas loads, cached per agent."""
        path = tmp_path / "openclaw.json"
        path.write_text(
            """// an OpenClaw config
{
  gateway: { port: 18789 },
  tools: {
    loopDetection: {
      enabled: true,   // turn it on
      warningThreshold: 8,
    },
  },
  agents: {
    list: [
      { id: 'safe-runner', tools: { loopDetection: { criticalThreshold: 16 } } },
    ],
  },
}
""",
            encoding="utf-8",
        )
        cfg = lw.load_config(path)
        assert cfg.source == str(path)
        agent = cfg.for_agent("safe-runner")
        assert (agent.enabled, agent.warning_threshold, agent.critical_threshold) == (True, 8, 16)
        assert cfg.for_agent("safe-runner") is agent  # cached
        assert lw.load_config(str(path)).for_agent(None).warning_threshold == 8

    def test_errors_name_file_and_line(self, tmp_path: Path) -> None:
        """Validation errors name the file and the line of the offending key."""
        path = tmp_path / "bad.json5"
        path.write_text(
            """{
  tools: {
    loopDetection: {
      historySize: 0,
    },
  },
  agents: {
    list: [
      { id: "a" },
      { id: "b" },
      {
        id: "c",
        tools: { loopDetection: {
          warningTreshold: 3,
        } },
      },
    ],
  },
}
""",
            encoding="utf-8",
        )
        with pytest.raises(lw.ConfigError) as exc:
            lw.load_config(path)
        rendered = issues_of(exc)
        assert rendered[0].startswith(f"{path}:4: tools.loopDetection.historySize:")
        assert rendered[1].startswith(
            f"{path}:14: agents.list[2].tools.loopDetection.warningTreshold:"
        )
        assert "did you mean 'warningThreshold'" in rendered[1]

    def test_parse_errors_name_file_and_line(self, tmp_path: Path) -> None:
        """JSON5 syntax errors name the file and the line."""
        path = tmp_path / "broken.json5"
        path.write_text(
            "{\n  tools: {\n    loopDetection: { enabled: true,, }\n  }\n}\n", encoding="utf-8"
        )
        with pytest.raises(lw.ConfigError) as exc:
            lw.load_config(path)
        (issue,) = exc.value.issues
        assert issue.file == str(path) and issue.line == 3
        assert "not valid JSON5" in issue.message

    def test_syntax_errors_name_their_column(self, tmp_path: Path) -> None:
        """A JSON5 syntax error names the column of the mistake, not where parsing gave up."""
        head = "  tools: {loopDetection: {enabled: true, historySize: 5"
        text = "{\n" + head + ",, } },\n}\n"  # the ",," of the report, at column 56
        path = tmp_path / "broken.json5"
        path.write_text(text, encoding="utf-8")
        assert text.splitlines()[1].index(",,") + 1 == 56
        with pytest.raises(lw.ConfigError) as exc:
            lw.load_config(path)
        (issue,) = exc.value.issues
        assert issue.line == 2
        assert issue.message == (
            'not valid JSON5 at column 56: ",," (an empty entry between two commas)'
        )

    @pytest.mark.parametrize(
        ("text", "line", "column", "what"),
        [
            ("{a: 1 b: 2}", 1, 7, "expected ','"),
            ("{a: 1,, }", 1, 6, '",," (an empty entry'),
            ("[1,,2]", 1, 3, '",," (an empty entry'),
            ("{\n  a: tru,\n}", 2, 6, "not a value: 'tru'"),
            ("{a: [1, 2}", 1, 10, "unexpected '}'"),
            ("{a: 01}", 1, 5, "not a value: '01'"),
            ('{a: "x\n}', 1, 5, "a string is not closed"),
            ("{a: 1}\n}", 2, 1, "after the end of the document"),
            ("{\n  a: {b: 1,\n", 3, 1, "the '{' of line 2 is open"),
            ("{a /* c */ 1}", 1, 12, "expected ':' after the key"),
        ],
    )
    def test_syntax_error_positions(self, text: str, line: int, column: int, what: str) -> None:
        """The first syntax error is found where it is, never after where json5 gives up."""
        from loopwarden._json5loc import syntax_error

        found = syntax_error(text)
        assert found is not None and (found.line, found.column) == (line, column), found
        assert what in found.message
        with pytest.raises(ValueError) as exc:
            json5.loads(text)
        parts = re.search(r"<string>:(\d+) .* column (\d+)", str(exc.value), re.DOTALL)
        assert parts is not None
        assert (found.line, found.column) <= (int(parts[1]), int(parts[2]))

    def test_valid_json5_has_no_syntax_error(self) -> None:
        """Every JSON5 and JSON block of the docs, and odd but valid JSON5, passes the check."""
        from loopwarden._json5loc import syntax_error
        from tests._snippets import ROOT

        texts = [
            "{a: .5, b: +1, c: 0x1F, d: Infinity, e: -NaN, f: 1e5, g: 'it\\'s', h: [1, 2,],}",
            '{$x: null, _y: true, "z": "a\\\nb", \u00e4: 1, /* c */ k: // c\n [] }',
            "[]",
            " 3 ",
        ]
        for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
            texts += re.findall(r"```json5?\n(.*?)```", page.read_text("utf-8"), re.DOTALL)
        checked = 0
        for text in texts:
            try:
                json5.loads(text)
            except ValueError:
                continue  # an excerpt, not a whole document
            assert syntax_error(text) is None, text
            checked += 1
        assert checked >= 10

    def test_missing_file(self, tmp_path: Path) -> None:
        """A file that cannot be read is a config error, not a traceback."""
        with pytest.raises(lw.ConfigError) as exc:
            lw.load_config(tmp_path / "nope.json")
        assert "cannot read config file" in str(exc.value)

    def test_with_overrides(self) -> None:
        """Overrides build a new config and are validated; the original is unchanged."""
        cfg = lw.load_config(
            {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 10}}}
        )
        changed = cfg.with_overrides({"warningThreshold": 5, "detectors.pingPong": False})
        assert changed.for_agent(None).warning_threshold == 5
        assert changed.for_agent(None).detectors.ping_pong is False
        assert cfg.for_agent(None).warning_threshold == 10
        with pytest.raises(lw.ConfigError):
            cfg.with_overrides({"warningThreshold": 0})


class TestOverridesEverywhere:
    def test_all_agents(self) -> None:
        """Overrides for all agents beat the agents' own blocks."""
        cfg = lw.load_config(
            {
                "tools": {"loopDetection": {"enabled": True}},
                "agents": {
                    "list": [{"id": "a", "tools": {"loopDetection": {"warningThreshold": 4}}}]
                },
            }
        )
        assert cfg.with_overrides({"warningThreshold": 7}).for_agent("a").warning_threshold == 4
        everywhere = cfg.with_overrides({"warningThreshold": 7}, all_agents=True)
        assert everywhere.for_agent("a").warning_threshold == 7
        assert everywhere.for_agent(None).warning_threshold == 7


class TestExplain:
    TEXT = """{
  tools: {
    loopDetection: {
      enabled: true,
      warningThreshold: 8,
      criticalThreshold: 5,
    },
  },
  agents: {
    list: [
      { id: "ops", tools: { loopDetection: { historySize: 12 } } },
    ],
  },
}
"""

    def test_fields_sources_and_lines(self, tmp_path: Path) -> None:
        """Every field of a block, with its value, where it came from and its file line."""
        path = tmp_path / "openclaw.json5"
        path.write_text(self.TEXT, encoding="utf-8")
        config = lw.load_config(path)
        views = {view.key: view for view in config.explain("ops")}
        assert list(views) == [
            "enabled",
            "historySize",
            "warningThreshold",
            "criticalThreshold",
            "unknownToolThreshold",
            "globalCircuitBreakerThreshold",
            "detectors.genericRepeat",
            "detectors.knownPollNoProgress",
            "detectors.pingPong",
            "postCompactionGuard.windowSize",
        ]
        assert views["enabled"] == FieldView("enabled", True, "global", 4)
        assert views["historySize"] == FieldView("historySize", 12, "agent", 11)
        assert views["unknownToolThreshold"] == FieldView("unknownToolThreshold", 10, "default")
        critical = views["criticalThreshold"]
        assert (critical.value, critical.source, critical.line) == (9, "repair", None)
        assert critical.detail is not None and critical.detail.startswith("criticalThreshold 5")
        assert config.explain(None)[1] == FieldView("historySize", 30, "default")

    def test_overrides_are_named(self) -> None:
        """Values laid over the file (``--set``) say so; they beat agent blocks only if asked."""
        config = lw.load_config(
            {"agents": {"list": [{"id": "a", "tools": {"loopDetection": {"historySize": 7}}}]}}
        )
        only_global = config.with_overrides({"historySize": 50, "detectors.pingPong": False})
        assert only_global.explain("a")[1] == FieldView("historySize", 7, "agent")
        assert only_global.explain(None)[1] == FieldView("historySize", 50, "override")
        everywhere = only_global.with_overrides({"historySize": 60}, all_agents=True)
        views = {view.key: view for view in everywhere.explain("a")}
        assert views["historySize"] == FieldView("historySize", 60, "override")
        assert views["detectors.pingPong"] == FieldView("detectors.pingPong", False, "override")
        assert everywhere.for_agent("a").source_of("historySize") == "override"
