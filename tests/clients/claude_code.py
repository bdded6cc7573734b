"""What Claude Code hands its model of our tools, watched through the real
client with a scripted model on loopback (issue "Fitted to the clients
people use").

Usage: claude_code.py CLAUDE_BINARY SERVER_BINARY REPORT.json

A small HTTP server on 127.0.0.1 plays the Anthropic Messages API: it
records every request Claude Code sends and answers the main conversation
with scripted tool_use blocks, one per turn. Claude Code runs in print mode
(`claude -p`) with a throwaway HOME, our server as its only MCP server, and
nothing else allowed. The report says, per scripted call, exactly what the
model was handed: which of our tools were loaded (in the request's `tools`)
or deferred (named only in the prompt), and the tool result's bytes. The
checks at the end fail the run when the always-loaded tools are not loaded,
or a large file read with default arguments does not reach the model as a
page with its continuation. Nothing leaves the machine.
"""

import json
import os
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SERVER = "coding-tools"
PREFIX = f"mcp__{SERVER}__"

# The tools an agent needs from its first turn (the server marks them
# anthropic/alwaysLoad); the rest stay behind Claude Code's tool search.
ALWAYS_LOADED = [
    "read_file",
    "list_files",
    "search_text",
    "apply_patch",
    "exec_command",
    "write_stdin",
]

# More server arguments (CI: `--catalog 0.5`, the reference 0.5.0's
# catalog, whose apply_changes is loaded too and whose reads carry the
# revision the model must copy).
SERVER_ARGS = os.environ.get("CTM_SERVER_ARGS", "").split()
CATALOG_05 = "0.5" in SERVER_ARGS
if CATALOG_05:
    ALWAYS_LOADED = ALWAYS_LOADED + ["apply_changes"]

# The scripted turns of the main conversation: (tool, arguments, label).
SCRIPT = [
    ("read_file", {"path": "small.txt"}, "read a 25-byte file"),
    ("exec_command", {"cmd": "echo hi; exit 3"}, "a failing command"),
    ("read_file", {"path": "big.txt"}, "read a 430 KB file with defaults"),
    ("read_file", {"path": "missing.txt"}, "a NOT_FOUND error"),
]


def sse(events):
    out = []
    for e in events:
        out.append(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n")
    return "".join(out).encode()


def message_events(blocks, stop_reason):
    events = [
        {
            "type": "message_start",
            "message": {
                "id": "msg_scripted",
                "type": "message",
                "role": "assistant",
                "model": "scripted",
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": 1, "output_tokens": 1},
            },
        }
    ]
    for i, b in enumerate(blocks):
        if b["type"] == "text":
            events.append(
                {
                    "type": "content_block_start",
                    "index": i,
                    "content_block": {"type": "text", "text": ""},
                }
            )
            events.append(
                {
                    "type": "content_block_delta",
                    "index": i,
                    "delta": {"type": "text_delta", "text": b["text"]},
                }
            )
        else:
            events.append(
                {
                    "type": "content_block_start",
                    "index": i,
                    "content_block": {
                        "type": "tool_use",
                        "id": b["id"],
                        "name": b["name"],
                        "input": {},
                    },
                }
            )
            events.append(
                {
                    "type": "content_block_delta",
                    "index": i,
                    "delta": {
                        "type": "input_json_delta",
                        "partial_json": json.dumps(b["input"]),
                    },
                }
            )
        events.append({"type": "content_block_stop", "index": i})
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": 1},
        }
    )
    events.append({"type": "message_stop"})
    return events


class Model:
    """The scripted model: the main conversation is the one whose request
    offers tools; anything else Claude Code asks gets a short text."""

    def __init__(self):
        self.lock = threading.Lock()
        self.requests = []
        self.turn = 0

    def answer(self, body):
        with self.lock:
            self.requests.append(body)
            tools = body.get("tools") or []
            main = any(
                t.get("name", "").startswith(PREFIX) or t.get("name") == "ToolSearch"
                for t in tools
            )
            if not main:
                return [{"type": "text", "text": "ok"}], "end_turn"
            if self.turn < len(SCRIPT):
                name, args, _ = SCRIPT[self.turn]
                self.turn += 1
                block = {
                    "type": "tool_use",
                    "id": f"toolu_{self.turn:02d}",
                    "name": PREFIX + name,
                    "input": args,
                }
                return [block], "tool_use"
            return [{"type": "text", "text": "done"}], "end_turn"


def serve(model):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):
            n = int(self.headers.get("content-length", "0"))
            body = json.loads(self.rfile.read(n) or b"{}")
            if self.path.split("?")[0].endswith("/count_tokens"):
                data = json.dumps({"input_tokens": 100}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            blocks, stop = model.answer(body)
            if body.get("stream"):
                data = sse(message_events(blocks, stop))
                ctype = "text/event-stream"
            else:
                msg = {
                    "id": "msg_scripted",
                    "type": "message",
                    "role": "assistant",
                    "model": "scripted",
                    "content": blocks,
                    "stop_reason": stop,
                    "stop_sequence": None,
                    "usage": {"input_tokens": 1, "output_tokens": 1},
                }
                data = json.dumps(msg).encode()
                ctype = "application/json"
            self.send_response(200)
            self.send_header("content-type", ctype)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self.send_response(404)
            self.send_header("content-length", "0")
            self.end_headers()

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def tool_results(requests):
    """Each tool_result the model was handed, by tool_use id, from the
    last main-conversation request (it carries the whole conversation)."""
    found = {}
    for body in requests:
        for m in body.get("messages", []):
            content = m.get("content")
            if not isinstance(content, list):
                continue
            for block in content:
                if block.get("type") == "tool_result":
                    found[block["tool_use_id"]] = block
    return found


def result_text(block):
    c = block.get("content")
    if isinstance(c, str):
        return c
    if isinstance(c, list):
        return "".join(b.get("text", "") for b in c if b.get("type") == "text")
    return ""


def main():
    claude, server, report_path = sys.argv[1], os.path.abspath(sys.argv[2]), sys.argv[3]
    model = Model()
    httpd = serve(model)
    port = httpd.server_address[1]
    with tempfile.TemporaryDirectory() as t:
        ws = os.path.join(t, "ws")
        home = os.path.join(t, "home")
        os.makedirs(ws)
        os.makedirs(home)
        with open(os.path.join(ws, "small.txt"), "w") as f:
            f.write("hello from a small file\n")
        with open(os.path.join(ws, "big.txt"), "w") as f:
            for i in range(1, 6233):
                f.write(f"line {i:05d} of a large file: " + "x" * 40 + "\n")
        big_bytes = os.path.getsize(os.path.join(ws, "big.txt"))
        config = {
            "mcpServers": {
                SERVER: {
                    "command": server,
                    "args": ["--workspace", ws, "--stdio", *SERVER_ARGS],
                }
            }
        }
        cfg = os.path.join(t, "mcp.json")
        with open(cfg, "w") as f:
            json.dump(config, f)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": home,
            "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{port}",
            "ANTHROPIC_API_KEY": "sk-ant-scripted-model-on-loopback",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "NO_COLOR": "1",
        }
        run = subprocess.run(
            [
                claude,
                "-p",
                "Use the coding-tools server.",
                "--mcp-config",
                cfg,
                "--strict-mcp-config",
                "--allowedTools",
                f"mcp__{SERVER}",
                "--output-format",
                "json",
            ],
            cwd=ws,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    httpd.shutdown()
    main_requests = [
        r
        for r in model.requests
        if any(
            t.get("name", "").startswith(PREFIX) or t.get("name") == "ToolSearch"
            for t in (r.get("tools") or [])
        )
    ]
    report = {
        "claude_exit": run.returncode,
        "claude_stderr": run.stderr[-2000:],
        "requests": len(model.requests),
        "main_requests": len(main_requests),
    }
    failures = []
    if not main_requests:
        failures.append("Claude Code sent no request offering tools")
        report["failures"] = failures
        json.dump(report, open(report_path, "w"), indent=2)
        print(json.dumps(report, indent=2))
        sys.exit(1)
    first = main_requests[0]
    names = [t.get("name", "") for t in first.get("tools", [])]
    loaded = sorted(n[len(PREFIX):] for n in names if n.startswith(PREFIX))
    system = json.dumps(first.get("system", ""))
    deferred = sorted(
        n
        for n in (
            "server_info check_exec_environment read_file list_dir list_files "
            "search_text apply_patch exec_command write_stdin kill_command "
            "read_output git_status git_diff git_log git_show git_blame "
            "request_permissions view_image"
        ).split()
        if n not in loaded and (PREFIX + n) in json.dumps(first)
    )
    report["loaded"] = loaded
    report["first_request"] = first
    report["deferred"] = deferred
    results = tool_results(main_requests)
    calls = []
    for i, (name, args, label) in enumerate(SCRIPT, 1):
        block = results.get(f"toolu_{i:02d}")
        text = result_text(block) if block else None
        calls.append(
            {
                "label": label,
                "tool": name,
                "arguments": args,
                "is_error": bool(block and block.get("is_error")),
                "bytes": None if text is None else len(text.encode()),
                "persisted": text is not None
                and ("Output too large" in text or "saved to" in text.lower()),
                "head": None if text is None else text[:300],
            }
        )
    # The structured lens: for a success the model reads the JSON of
    # structuredContent, not our text (docs/clients.md).
    for i, c in enumerate(calls, 1):
        block = results.get(f"toolu_{i:02d}")
        if block is None or c["is_error"] or c["persisted"]:
            continue
        try:
            obj = json.loads(result_text(block))
        except ValueError:
            obj = None
        c["lens"] = "structured" if isinstance(obj, dict) and "ok" in obj else "text"
    report["calls"] = calls
    print(f"# Claude Code {run.returncode=} ({len(model.requests)} requests, {len(main_requests)} in the conversation)")
    print(f"loaded: {', '.join(loaded) or '(none)'}")
    print(f"deferred: {', '.join(deferred) or '(none)'}")
    for c in calls:
        print(
            f"- {c['label']}: {c['bytes']} bytes, {c.get('lens', 'text')} lens{' (error)' if c['is_error'] else ''}"
            f"{' PERSISTED TO A FILE' if c['persisted'] else ''}"
        )
    for t in ALWAYS_LOADED:
        if t not in loaded:
            failures.append(f"{t} is not loaded for the model (deferred behind tool search)")
    big = calls[2]
    if big["bytes"] is None or big["persisted"] or big["is_error"]:
        failures.append(f"the {big_bytes}-byte file with defaults did not reach the model inline: {big['head']!r}")
    if big["bytes"] is not None and not big["persisted"]:
        full = result_text(results["toolu_03"])
        if "next_start_line" not in full and "start_line=" not in full:
            failures.append("the large file's page names no continuation")
    if CATALOG_05:
        first_read = results.get("toolu_01")
        if first_read is None or "revision" not in result_text(first_read):
            failures.append("catalog 0.5: the read's revision does not reach the model")
    report["failures"] = failures
    with open(report_path, "w") as f:
        json.dump(report, f, indent=2)
    for fl in failures:
        print(f"FAIL {fl}")
    if failures:
        sys.exit(1)
    print("claude-code: all checks passed")


if __name__ == "__main__":
    main()
