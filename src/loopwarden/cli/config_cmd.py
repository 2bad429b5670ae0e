"""``loopwarden config check``: validate a config and show the effective settings per agent."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import click

from ._clickutil import (
    CONTEXT,
    EXIT_FAIL,
    EXIT_OK,
    UsageFailure,
    colour_enabled,
    parse_sets,
    run_command,
    styler,
)

if TYPE_CHECKING:
    from ..config import Config, LoopDetectionConfig
    from ..errors import ConfigIssue

__all__ = ["main"]

SETTINGS = (
    ("sendTools", "send_tools"),
    ("outcomeProfiles", "outcome_profiles"),
    ("store", "store"),
    ("failMode", "fail_mode"),
    ("onStop", "on_stop"),
    ("runRecord", "run_record"),
    ("logParams", "log_params"),
    ("stateTtlSeconds", "state_ttl_seconds"),
    ("telemetry", "telemetry"),
)

GROUP_HELP = "Work with loopwarden config files (OpenClaw layout, JSON5 or JSON)."

CHECK_HELP = """Validate FILE and print the effective config of each agent.

\b
For the global tools.loopDetection block and every agent with its own block
(agents.list[].tools.loopDetection or agents.entries.<id>.tools.loopDetection),
prints each setting after merging and threshold repair, and where its value
came from: default, global (the global block), agent (the agent's block),
repair (criticalThreshold/globalCircuitBreakerThreshold raised to keep the
threshold order) or override (--set). File values show their line.

\b
Then every rule in precedence order (OpenClaw's and loopwarden's own), with
its thresholds and the key and source of each number, and, per loop pattern
(identical loop, ping-pong, known poll, failure streak, unknown tool,
post-compaction), the call at which the guard first warns, blocks and stops
and which rule does it: measured by running the guard under the config on a
synthetic call sequence of that pattern.

\b
Exit codes: 0 the config is valid; 1 it is not (every problem is listed with
its path and line); 2 usage error (missing file, bad option).

\b
Examples:
  loopwarden config check ~/.openclaw/openclaw.json
  loopwarden config check loopwarden.json5 --agent ops
  loopwarden config check loopwarden.json5 --set warningThreshold=5 --format json
"""


@click.group(name="config", help=GROUP_HELP, context_settings=CONTEXT, no_args_is_help=True)
def config_group() -> None:
    pass


@config_group.command(name="check", help=CHECK_HELP, context_settings=CONTEXT)
@click.argument("file", type=click.Path(exists=True, dir_okay=False, readable=True))
@click.option("--agent", metavar="ID", help="Show only this agent (its merged block).")
@click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="KEY=VALUE",
    help="Lay a value over the global block first, as replay does (repeatable).",
)
@click.option(
    "-f",
    "--format",
    "output_format",
    type=click.Choice(["text", "json"], case_sensitive=False),
    default="text",
    show_default=True,
)
@click.option("--color/--no-color", "color", default=None, help="Colour (default: on a TTY).")
def check_command(
    file: str, agent: str | None, sets: tuple[str, ...], output_format: str, color: bool | None
) -> int:
    from ..config import load_config
    from ..errors import ConfigError

    overrides = parse_sets(sets)
    style = styler(colour_enabled(color, sys.stdout))
    try:
        config = load_config(file)
    except ConfigError as exc:
        return _invalid(file, exc.issues, output_format, style)
    if overrides:
        try:
            config = config.with_overrides(overrides, all_agents=True)
        except ConfigError as exc:
            raise UsageFailure(f"--set: {exc}") from None
    refused = _refused_by_guard(config, file)
    if refused:
        return _invalid(file, refused, output_format, style)

    agents: list[str | None]
    if agent is not None:
        _known_agent(config, agent, file)
        agents = [agent]
    else:
        agents = [None, *config.agent_ids()]
    views = [_view(config, name, file) for name in agents]
    settings = _settings(config)
    if output_format == "json":
        import orjson

        data = {
            "file": file,
            "valid": True,
            "overrides": overrides,
            "agents": [
                {
                    "agent": view["agent"],
                    "block": view["block"],
                    "has_own_block": view["has_own_block"],
                    "effective": view["effective"],
                    "fields": view["fields"],
                    "repairs": view["repairs"],
                    "rules": [r.to_dict() for r in view["rules"]],
                    "first_actions": [p.to_dict() for p in view["first_actions"]],
                }
                for view in views
            ],
            "settings": settings,
        }
        click.echo(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode())
        return EXIT_OK

    own = config.agent_ids()
    summary = f"{len(own)} agent block{'s' if len(own) != 1 else ''}"
    click.echo(f"{file}: {style('valid', fg='green', bold=True)} ({summary})")
    for view in views:
        click.echo()
        _print_view(view, style)
    click.echo()
    click.echo(style("loopwarden settings", bold=True) + " (top-level 'loopwarden' key)")
    for key, info in settings.items():
        value = _show(info["value"])
        where = info["source"]
        if info.get("line") is not None and info["source"] != "default":
            where += f" {file}:{info['line']}"
        click.echo(f"  {key:<18} {value:<28} {style(where, dim=True)}")
    return EXIT_OK


def _invalid(file: str, issues: Sequence[ConfigIssue], output_format: str, style: Any) -> int:
    """Print the problems of an invalid config; the exit code."""
    if output_format == "json":
        import orjson

        problems = [
            {"path": i.path, "message": i.message, "file": i.file, "line": i.line} for i in issues
        ]
        data = {"file": file, "valid": False, "problems": problems}
        click.echo(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode())
    else:
        count = len(issues)
        click.echo(
            f"{file}: {style('invalid', fg='red', bold=True)} "
            f"({count} problem{'s' if count != 1 else ''})"
        )
        for issue in issues:
            click.echo(f"  - {issue}")
    return EXIT_FAIL


def _refused_by_guard(config: Config, file: str) -> list[ConfigIssue]:
    """What building the guard from ``config`` refuses, as the guard builds it: the store
    from its URL (store constructors neither connect nor create files), the telemetry.

    A config the guard refuses would leave a hook allowing every call unguarded, so
    ``config check`` must not call it valid.
    """
    from ..errors import ConfigError, ConfigIssue
    from ..guard import LoopGuard
    from ..stores import store_from_url

    settings = config.settings
    store = None
    if settings.store is not None:
        try:
            store = store_from_url(settings.store, ttl_seconds=settings.state_ttl_seconds)
        except ConfigError as exc:
            line = config.line_of(("loopwarden", "store"))
            return [ConfigIssue("loopwarden.store", i.message, file, line) for i in exc.issues]
    try:
        guard = LoopGuard(config, store=store)
    except ConfigError as exc:
        return [replace(i, file=i.file or file) for i in exc.issues]
    except ImportError as exc:  # telemetry without the OpenTelemetry API
        line = config.line_of(("loopwarden", "telemetry"))
        return [ConfigIssue("loopwarden.telemetry", str(exc), file, line)]
    guard.close()
    return []


def _known_agent(config: Config, agent: str, file: str) -> None:
    """``--agent`` must name an agent of the file (ids compared as OpenClaw does)."""
    from ..config import normalize_agent_id

    listed = config.listed_agents()
    if normalize_agent_id(agent) in listed:
        return
    if not listed:
        raise UsageFailure(
            f"--agent {agent!r}: {file} names no agents (agents.list[].id or "
            "agents.entries.<id>); without --agent the global block is shown, which every "
            "agent gets"
        )
    names = ", ".join(listed)
    raise UsageFailure(f"--agent {agent!r} is not an agent of {file}; its agents: {names}")


def _view(config: Config, agent: str | None, file: str) -> dict[str, Any]:
    from ..report.rules import first_actions, rules_in_force

    cfg = config.for_agent(agent)
    block_path = config.agent_block_path(agent) if agent is not None else None
    fields = {
        field.key: {
            "value": field.value,
            "source": field.source,
            "line": field.line,
            "detail": field.detail,
        }
        for field in config.explain(agent)
    }
    return {
        "agent": agent,
        "block": block_path if block_path is not None else "tools.loopDetection",
        "has_own_block": block_path is not None,
        "effective": cfg.to_dict(),
        "fields": fields,
        "repairs": list(cfg.repairs),
        "file": file,
        "cfg": cfg,
        "rules": rules_in_force(config, agent),
        "first_actions": first_actions(config, agent),
    }


def _show(value: Any) -> str:
    if value is None:
        return "unset"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, (list, tuple, frozenset, set)):
        return "[" + ", ".join(sorted(str(v) for v in value)) + "]"
    if isinstance(value, Mapping) and all(
        v is None or isinstance(v, (bool, int, float)) for v in value.values()
    ):
        return "{" + ", ".join(f"{k}: {_show(v)}" for k, v in value.items()) + "}"
    if isinstance(value, Mapping):
        return "{" + ", ".join(str(k) for k in sorted(value)) + "}" if value else "{}"
    return str(value)


def _print_view(view: dict[str, Any], style: Any) -> None:
    agent = view["agent"]
    if agent is None:
        title = "global block (tools.loopDetection) — applies to agents without their own block"
    elif view["has_own_block"]:
        title = f"agent {agent!r} ({view['block']} over the global block)"
    else:
        title = f"agent {agent!r} — no block of its own; the global block applies"
    click.echo(style(title, bold=True))
    for key, info in view["fields"].items():
        source = info["source"]
        where = ""
        if info["line"] is not None:
            where = f" {view['file']}:{info['line']}"
        elif info["detail"]:
            where = f" ({info['detail']})"
        colour = {"default": None, "repair": "yellow", "override": "cyan"}.get(source, "green")
        value = _show(info["value"])
        click.echo(f"  {key:<32} {value:<7} {style(source, fg=colour)}{style(where, dim=True)}")
    click.echo("  → " + _meaning(view["cfg"]))
    _print_rules(view, style)


_SWITCHES = {
    "generic_repeat": "genericRepeat",
    "known_poll_no_progress": "knownPollNoProgress",
    "ping_pong": "pingPong",
}


def _why_off(rule: Any, view: dict[str, Any]) -> str:
    """Why a rule does not run for this agent, in terms of the key that switches it."""
    if rule.switch is not None and rule.switch.value is False:
        return f"{rule.switch.key}: false, {rule.switch.where(view['file'])}"
    cfg = view["cfg"]
    if cfg.enabled is not True:
        return f"{view['block']}.enabled is {_show(cfg.enabled)}"
    switch = _SWITCHES.get(rule.name)
    if switch is not None:
        return f"{view['block']}.detectors.{switch}: false"
    return "switched off"


def _meaning(cfg: LoopDetectionConfig) -> str:
    if cfg.enabled is False:
        return "enabled: false — the guard does nothing at all for this agent"
    if cfg.enabled is None:
        return (
            "enabled unset — only the post-compaction and unknown-tool guards run "
            "(set enabled: true for every rule below)"
        )
    return "enabled — every rule below that is on runs, in this order"


def _print_rules(view: dict[str, Any], style: Any) -> None:
    """The rules in force with their numbers and sources, then what acts first."""
    file = view["file"]
    click.echo(style("  rules, in precedence order", bold=True))
    for rule in view["rules"]:
        if not rule.on:
            click.echo(f"    {rule.name:<26} {style('off', dim=True)} ({_why_off(rule, view)})")
            continue
        unit = rule.thresholds[0].unit if rule.thresholds else ""
        click.echo(f"    {rule.name:<26} {rule.numbers():<28} {style(unit, dim=True)}")
        seen: set[str] = set()
        for threshold in rule.thresholds:
            for src in threshold.sources:
                if src.key in seen:
                    continue
                seen.add(src.key)
                colour = {"default": None, "repair": "yellow", "override": "cyan"}.get(
                    src.source, "green"
                )
                text = f"{src.key} = {_show(src.value)}"
                click.echo(f"      {text:<56} {style(src.where(file), fg=colour)}")
    click.echo(
        style("  what acts first", bold=True)
        + style(" (the guard run on a synthetic sequence of each pattern)", dim=True)
    )
    for result in view["first_actions"]:
        click.echo(f"    {result.pattern.title:<16} {result.text()}")
        click.echo(f"    {'':<16} {style(result.pattern.sequence, dim=True)}")


def _settings(config: Config) -> dict[str, dict[str, Any]]:
    from ..config import Settings
    from ..config.model import TELEMETRY_KEYS

    settings = config.settings
    defaults = Settings()
    raw = config.raw.get("loopwarden")
    given = raw if isinstance(raw, Mapping) else {}
    out: dict[str, dict[str, Any]] = {}
    for key, attr in SETTINGS:
        value = getattr(settings, attr)
        if attr == "outcome_profiles":
            value = {name: _profile(profile) for name, profile in value.items()}
        elif attr == "telemetry":
            value = {key: getattr(value, name) for key, name in TELEMETRY_KEYS.items()}
        elif isinstance(value, frozenset):
            value = sorted(value)
        elif attr == "store" and isinstance(value, str):
            from ..stores._redis_url import redact

            value = redact(value)  # a store URL's password is never printed
        source = "loopwarden" if given.get(key) is not None else "default"
        if source == "default" and getattr(defaults, attr) != getattr(settings, attr):
            source = "loopwarden"
        out[key] = {"value": value, "source": source}
    from ..config.model import RULE_SETTINGS
    from ..report.rules import own_settings

    for src in own_settings(config):
        out[src.key.split(".", 1)[1]] = {"value": src.value, "source": src.source, "line": src.line}
    for key, cls in RULE_SETTINGS.items():
        section = settings.rules.get(cls)
        source = "loopwarden" if given.get(key) is not None else "default"
        out[key] = {
            "value": section.to_dict(),
            "source": source,
            "line": config.line_of(("loopwarden", key)),
        }
    return out


def _profile(profile: Any) -> dict[str, Any]:
    return {
        "volatileKeys": sorted(profile.volatile_keys),
        "volatilePatterns": [p.pattern for p in profile.volatile_patterns],
        "poll": profile.poll,
        "send": profile.send,
    }


def main(argv: Sequence[str]) -> int:
    return run_command(config_group, argv, "loopwarden config")
