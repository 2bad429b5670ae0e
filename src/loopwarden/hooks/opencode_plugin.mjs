// loopwarden's OpenCode plugin: every tool call through the same hook code as the other
// coding agents (docs/hooks.md). `loopwarden install opencode` writes a two-line plugin
// file that imports this module and passes it the hook command of that installation.
//
// Each event goes to the hook helper over its Unix socket, exactly as the hook command
// forwards it (hooks/_protocol.py: same wire format, same socket name), so a tool call
// costs one local round trip and no process. When no helper answers, the hook command
// runs once for the event (it starts a helper for the next ones). Anything that goes
// wrong here allows the call: loopwarden never breaks the agent.

import { spawn } from "node:child_process";
import { lstatSync } from "node:fs";
import { createConnection } from "node:net";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

// Must match hooks/_protocol.py (tests/hooks/test_opencode.py checks it).
export const PROTOCOL = "LWH3";
export const ENV_KEYS = [
  "HOME",
  "LOOPWARDEN_AGENT_ID",
  "LOOPWARDEN_CONFIG",
  "LOOPWARDEN_LOG",
  "LOOPWARDEN_STATE",
  "XDG_CONFIG_HOME",
  "XDG_DATA_HOME",
];
const SOCKET_TIMEOUT_MS = 20000; // as the hook command: above the store's busy timeout
// The helper greets every connection before it reads (hooks/_protocol.py HELLO): a frozen
// helper is passed over after HELLO_TIMEOUT_MS, with nothing sent to it.
const HELLO = 0x2b; // "+"
const HELLO_TIMEOUT_MS = 1000;
const PROCESS_TIMEOUT_MS = 30000; // the other agents' hook timeout
const MAX_IDS = 4096; // call ids (denied, failed) and sessions remembered per process: oldest dropped

// This file is <site-packages>/loopwarden/hooks/opencode_plugin.mjs.
const PACKAGE_DIR = resolve(dirname(fileURLToPath(import.meta.url)), "..");

export function runtimeDir(env) {
  if (env.LOOPWARDEN_RUNTIME_DIR) return env.LOOPWARDEN_RUNTIME_DIR;
  if (env.XDG_RUNTIME_DIR) return `${env.XDG_RUNTIME_DIR}/loopwarden`;
  return `/tmp/loopwarden-${process.getuid ? process.getuid() : 0}`;
}

function fnv1a64(text) {
  let h = 0xcbf29ce484222325n;
  for (const byte of Buffer.from(text, "utf8")) {
    h = ((h ^ BigInt(byte)) * 0x100000001b3n) & 0xffffffffffffffffn;
  }
  return h.toString(16).padStart(16, "0");
}

// The helper's socket for the hook command's interpreter and this loopwarden package.
export function socketPath(env, python) {
  const pythonDir = python.slice(0, Math.max(0, python.lastIndexOf("/")));
  return `${runtimeDir(env)}/hook-${fnv1a64(`${pythonDir}\0${PACKAGE_DIR}\0${PROTOCOL}`)}.sock`;
}

function privateDir(path) {
  try {
    const st = lstatSync(path); // a symlink is never followed
    return st.isDirectory() && st.uid === process.getuid() && (st.mode & 0o077) === 0;
  } catch {
    return false;
  }
}

// Wait for the helper's greeting, send `request`, half-close, read to the end: the raw
// answer, or null when no live helper took it (nothing was sent), or {failed} once sent.
function exchange(path, request) {
  return new Promise((done) => {
    const chunks = [];
    let sent = false;
    let over = false;
    let close = () => {};
    let send = () => {};
    const finish = (value) => {
      if (over) return;
      over = true;
      clearTimeout(timer);
      clearTimeout(hello);
      close();
      done(value);
    };
    const failed = (why) => finish(sent ? { failed: why } : null);
    const timer = setTimeout(() => failed("timed out"), SOCKET_TIMEOUT_MS);
    const hello = setTimeout(() => sent || finish(null), HELLO_TIMEOUT_MS);
    const received = (chunk) => {
      if (!sent) {
        if (chunk.length === 0) return;
        if (chunk[0] !== HELLO) return finish(null); // not a helper of this protocol
        clearTimeout(hello);
        sent = true;
        send();
        chunk = chunk.subarray(1);
      }
      if (chunk.length) chunks.push(chunk);
    };
    const end = () => (sent ? finish(Buffer.concat(chunks)) : finish(null));
    if (globalThis.Bun?.connect) {
      // Bun's node:net end() closes both directions on a Unix socket, and the answer is
      // lost: its own sockets can half-close.
      globalThis.Bun.connect({
        unix: path,
        allowHalfOpen: true,
        socket: {
          open(sock) {
            close = () => sock.end();
            send = () => {
              sock.write(request);
              sock.shutdown();
            };
          },
          data(_sock, chunk) {
            received(Buffer.from(chunk));
          },
          close: end,
          error(_sock, error) {
            failed(error?.code || String(error));
          },
          connectError(_sock, error) {
            failed(error?.code || String(error));
          },
        },
      }).catch((error) => failed(error?.code || String(error)));
      return;
    }
    const sock = createConnection(path);
    close = () => sock.destroy();
    send = () => sock.end(request);
    sock.on("data", received);
    sock.on("error", (error) => failed(error.code || String(error)));
    sock.on("end", end);
  });
}

// The helper's answer to one event: {code, stdout, stderr}; null when no helper took it.
export async function forward(env, python, argv, payload, cwd) {
  if (["0", "off", "no", "false"].includes(String(env.LOOPWARDEN_HOOK_DAEMON ?? "1").toLowerCase())) {
    return null; // as the hook command: every event in a hook process of its own
  }
  const path = socketPath(env, python);
  if (!process.getuid || !privateDir(dirname(path))) return null;
  const pairs = ENV_KEYS.filter((k) => env[k] !== undefined).map((k) => `${k}=${env[k]}`);
  const fields = [PROTOCOL, cwd, String(argv.length), ...argv, String(pairs.length), ...pairs, ""];
  const raw = await exchange(path, Buffer.concat([Buffer.from(fields.join("\0"), "utf8"), payload]));
  if (raw === null) return null;
  if (!(raw instanceof Buffer)) {
    // The event may be recorded already: never handle it twice; allow.
    return { code: 0, stdout: "{}", stderr: `loopwarden: the hook helper failed (${raw.failed}); allowed` };
  }
  const first = raw.indexOf(0);
  const second = first < 0 ? -1 : raw.indexOf(0, first + 1);
  const code = first < 0 ? "" : raw.subarray(0, first).toString();
  if (code === "R") return null; // an outdated helper, exiting
  const size = Number(second < 0 ? Number.NaN : raw.subarray(first + 1, second).toString());
  if (code === "" || !Number.isInteger(Number(code)) || !Number.isInteger(size)) {
    return { code: 0, stdout: "{}", stderr: "loopwarden: malformed answer from the hook helper; allowed" };
  }
  const rest = raw.subarray(second + 1);
  return { code: Number(code), stdout: rest.subarray(size).toString(), stderr: rest.subarray(0, size).toString() };
}

// The hook command itself for one event (no helper yet: it starts one).
function runHook(command, payload, cwd) {
  return new Promise((done) => {
    let child;
    try {
      child = spawn(command[0], command.slice(1), { cwd, stdio: ["pipe", "pipe", "pipe"] });
    } catch (error) {
      return done({ code: 1, stdout: "{}", stderr: `loopwarden: cannot run the hook (${error}); allowed` });
    }
    const out = [];
    const err = [];
    const timer = setTimeout(() => child.kill("SIGKILL"), PROCESS_TIMEOUT_MS);
    child.stdout.on("data", (c) => out.push(c));
    child.stderr.on("data", (c) => err.push(c));
    child.on("error", (error) => {
      clearTimeout(timer);
      done({ code: 1, stdout: "{}", stderr: `loopwarden: cannot run the hook (${error.code || error}); allowed` });
    });
    child.on("close", (code) => {
      clearTimeout(timer);
      done({ code: code ?? 1, stdout: Buffer.concat(out).toString(), stderr: Buffer.concat(err).toString() });
    });
    child.stdin.on("error", () => {}); // a hook that exits before reading
    child.stdin.end(payload);
  });
}

class Remembered {
  // A bounded set of call ids (insertion order; the oldest go first).
  constructor(limit) {
    this.limit = limit;
    this.ids = new Set();
  }
  add(id) {
    if (!id) return;
    this.ids.add(id);
    if (this.ids.size > this.limit) this.ids.delete(this.ids.values().next().value);
  }
  has(id) {
    return this.ids.has(id);
  }
}

// The plugin for one loopwarden installation. `command`: the hook command's words;
// `args`: the hook's own arguments in it (`opencode [--config FILE] ...`).
export function loopwarden({ command, args }) {
  return async ({ client, directory }) => {
    const cwd = directory || process.cwd();
    const runs = new Map(); // session id -> the user's prompt (message id): the run
    const stopped = new Map(); // session id -> stop reason, until the next prompt
    const notes = new Map(); // call id -> a note for the model, from before the call
    const denied = new Remembered(MAX_IDS);
    const failed = new Remembered(MAX_IDS);

    const report = (text) => {
      if (!text || !text.trim()) return;
      try {
        client?.app?.log?.({ body: { service: "loopwarden", level: "warn", message: text.trim() } })?.catch?.(() => {});
      } catch {
        // the hook log has it too
      }
    };

    const ask = async (event) => {
      try {
        const payload = Buffer.from(JSON.stringify({ cwd, ...event }), "utf8");
        const env = process.env;
        const answer = (await forward(env, command[0], args, payload, cwd)) ?? (await runHook(command, payload, cwd));
        report(answer.stderr);
        const parsed = answer.code === 0 && answer.stdout.trim() ? JSON.parse(answer.stdout) : {};
        return parsed && typeof parsed === "object" ? parsed : {};
      } catch (error) {
        report(`loopwarden: ${error}; allowed`);
        return {};
      }
    };

    const base = (name, sessionID) => ({
      hook_event_name: name,
      session_id: sessionID,
      ...(runs.has(sessionID) ? { run_id: runs.get(sessionID) } : {}),
    });

    return {
      "chat.message": async (input, output) => {
        const id = output?.message?.id ?? input?.messageID;
        if (input?.sessionID && id) {
          runs.delete(input.sessionID); // re-inserted last: the oldest session goes first
          runs.set(input.sessionID, id);
          if (runs.size > MAX_IDS) runs.delete(runs.keys().next().value);
        }
        stopped.delete(input?.sessionID); // a new prompt: a new run
      },
      // Before every model request: a stopped run makes none.
      "chat.params": async (input) => {
        const reason = stopped.get(input?.sessionID);
        if (reason) throw new Error(reason);
      },
      "tool.execute.before": async (input, output) => {
        const answer = await ask({
          ...base("tool.execute.before", input.sessionID),
          tool_name: input.tool,
          tool_input: output?.args ?? {},
          tool_use_id: input.callID,
        });
        if (typeof answer.stop === "string") {
          stopped.set(input.sessionID, answer.stop);
          denied.add(input.callID);
          throw new Error(answer.stop);
        }
        if (typeof answer.deny === "string") {
          denied.add(input.callID);
          throw new Error(answer.deny);
        }
        if (typeof answer.context === "string") notes.set(input.callID, answer.context);
      },
      "tool.execute.after": async (input, output) => {
        const metadata = output?.metadata ?? {};
        const response = { output: output?.output ?? "" };
        if (metadata.exit !== undefined) response.exit = metadata.exit;
        const answer = await ask({
          ...base("tool.execute.after", input.sessionID),
          tool_name: input.tool,
          tool_input: input.args ?? {},
          tool_use_id: input.callID,
          tool_response: response,
        });
        const extra = [notes.get(input.callID), answer.context, answer.stop].filter((t) => typeof t === "string" && t);
        notes.delete(input.callID);
        if (typeof answer.stop === "string") stopped.set(input.sessionID, answer.stop);
        if (extra.length && output) output.output = `${output.output ?? ""}\n\n${extra.join("\n\n")}`;
      },
      event: async ({ event }) => {
        if (event?.type === "session.compacted") {
          await ask(base("session.compacted", event.properties?.sessionID));
          return;
        }
        if (event?.type !== "message.part.updated") return;
        const part = event.properties?.part;
        // A tool that threw: OpenCode runs no after hook for it (not a call loopwarden denied).
        if (part?.type !== "tool" || part.state?.status !== "error") return;
        if (denied.has(part.callID) || failed.has(part.callID) || part.state.metadata?.interrupted) return;
        failed.add(part.callID);
        notes.delete(part.callID); // its after hook, which would show the note, never comes
        await ask({
          ...base("tool.failed", part.sessionID),
          tool_name: part.tool,
          tool_input: part.state.input ?? {},
          tool_use_id: part.callID,
          error: part.state.error || "tool call failed",
        });
      },
    };
  };
}
