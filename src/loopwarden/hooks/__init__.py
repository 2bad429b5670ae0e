"""Coding-agent hooks: Claude Code, Codex CLI and Gemini CLI.

``loopwarden hook AGENT`` reads one hook event (JSON on stdin) and answers the
way that agent expects. The modules here do the work; the command's entry
point (``loopwarden.cli.hook``) stays tiny, because a hook process starts for
every tool call:

* :mod:`._protocol` - what the entry point and the helper share (stdlib only);
* :mod:`.agents` - per-agent event names, fields and answer shapes;
* :mod:`.runner` - one event through the guard (run ids, transcript, answer);
* :mod:`.options` - the command line; where the config, state and log are;
* :mod:`.context` - guards and side-record stores, cached in the helper;
* :mod:`.hooklog` - each request's log records, to the hook log and stderr;
* :mod:`.transcript` - unknown-tool calls read from the session transcript;
* :mod:`.daemon` - the optional long-lived helper the entry point forwards to;
* :mod:`.httpserve` - the helper's HTTP side (Claude Code's HTTP hooks, the shell hook);
* :mod:`.httpstart` - the session-start hook's part: make sure the helper answers HTTP;
* :mod:`.httpkeys` - the user's HTTP port and key; :mod:`.peeruid` - who connects;
* :mod:`.shellhook` - Codex's and Gemini's hook command in bash (``shellhook.sh``);
* :mod:`.settings` - the agents' settings files, for ``install`` and ``doctor``.
"""

# ruff: noqa: I002 - no `from __future__ import annotations` on the hook's hot path:
# it imports the __future__ module, about as costly as two of our own modules.

__all__: list[str] = []
