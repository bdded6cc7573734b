"""What Gemini CLI hands its model of our tools, watched through the real
client with a scripted model on loopback (modelled on claude_code.py).

Usage: gemini_cli.py GEMINI_BINARY SERVER_BINARY REPORT.json

A small HTTP server on 127.0.0.1 plays the Gemini API (generateContent,
streamGenerateContent?alt=sse, countTokens): it records every request
Gemini CLI sends and answers the main conversation (the request whose
`tools` declare our MCP tools) with one scripted `functionCall` part per
turn. Gemini CLI runs headless (`gemini -p ... --yolo`) with a throwaway
HOME, GOOGLE_GEMINI_BASE_URL pointing at the scripted model (the
"gemini-api-key" auth type with a fake key), usage statistics / telemetry / update
checks / IDE integration off, and our server as its only MCP server.

When `unshare -rn` works, the whole run (scripted model, client, our
server) is re-executed inside a fresh network namespace that has only a
loopback interface, so nothing can leave the machine; the report records
whether that isolation was in force.

The report says, per scripted call, exactly what the model was handed as
the functionResponse (bytes of `response.output` / `response.error`),
which rendering of our result that is (the `content` text, the
`structuredContent` JSON, or Gemini CLI's own error wrapper), and whether
Gemini CLI truncated it; plus which of our tools were declared to the
model, under which names, with their schema sizes.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SERVER = "coding-tools"
# Gemini CLI names an MCP tool mcp_<server>_<tool> (generateValidName,
# MCP_TOOL_PREFIX = "mcp_", MCP_QUALIFIED_NAME_SEPARATOR = "_").
PREFIX = f"mcp_{SERVER}_"

OUR_TOOLS = (
    "server_info check_exec_environment read_file list_dir list_files "
    "search_text apply_patch exec_command write_stdin kill_command "
    "read_output git_status git_diff git_log git_show git_blame "
    "request_permissions view_image"
).split()

# More server arguments (CI: `--catalog 0.5`, the reference 0.5.0's catalog:
# apply_changes, and no request_permissions outside dangerous mode).
SERVER_ARGS = os.environ.get("CTM_SERVER_ARGS", "").split()
CATALOG_05 = "0.5" in SERVER_ARGS
if CATALOG_05:
    OUR_TOOLS = [t for t in OUR_TOOLS if t != "request_permissions"] + ["apply_changes"]

SCRIPT = [
    ("read_file", {"path": "small.txt"}, "read a 25-byte file"),
    ("exec_command", {"cmd": "echo hi; exit 3"}, "a failing command"),
    ("read_file", {"path": "big.txt"}, "read a 430 KB file with defaults"),
    ("read_file", {"path": "missing.txt"}, "a NOT_FOUND error"),
]
FINAL_TEXT = "done"

# Gemini CLI 0.61.0, bundle/chunk-JDPZ4CE3.js:
#   DEFAULT_TRUNCATE_TOOL_OUTPUT_THRESHOLD = 4e4 (characters) applied in
#   truncateOutputIfNeeded to a DiscoveredMCPTool result that is a single
#   text part; formatTruncatedToolOutput keeps 20% head / 80% tail and
#   starts with "Output too large. Showing first ...".
TRUNCATE_THRESHOLD = 40000
UNTRUSTED_OPEN = "<untrusted_context>\n"
UNTRUSTED_CLOSE = "\n</untrusted_context>"


# How gemini -p is let run MCP tools (CTM_GEMINI_MODE picks one).
MODES = {
    "yolo": {"flags": ["--yolo"], "trust": True},
    "trust": {"flags": [], "trust": True},
    "default": {"flags": [], "trust": False},
}


def make_workspace(ws):
    os.makedirs(ws, exist_ok=True)
    with open(os.path.join(ws, "small.txt"), "w") as f:
        f.write("hello from a small file\n")
    with open(os.path.join(ws, "big.txt"), "w") as f:
        for i in range(1, 6233):
            f.write(f"line {i:05d} of a large file: " + "x" * 40 + "\n")
    return os.path.getsize(os.path.join(ws, "big.txt"))


def probe_server(server, ws):
    """Ask our server directly (tools/list, the scripted tools/call), so the
    client's rendering can be compared with what our server answered."""
    p = subprocess.Popen([server, "--workspace", ws, "--stdio", *SERVER_ARGS], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

    def rpc(i, method, params):
        p.stdin.write(json.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": params}) + "\n")
        p.stdin.flush()
        while True:
            line = p.stdout.readline()
            if not line:
                raise RuntimeError(f"our server closed stdout during {method}")
            o = json.loads(line)
            if o.get("id") == i:
                return o

    try:
        init = rpc(1, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "probe", "version": "0"}})
        p.stdin.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n")
        p.stdin.flush()
        tools = rpc(2, "tools/list", {})["result"]["tools"]
        results = [rpc(10 + k, "tools/call", {"name": n, "arguments": a})["result"] for k, (n, a, _) in enumerate(SCRIPT)]
    finally:
        p.stdin.close()
        p.wait(timeout=30)
    return init["result"], tools, results


def compact(obj):
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def schema_keywords(schema, path="", out=None):
    """Every (path, keyword) in a JSON schema, properties named by path."""
    out = set() if out is None else out
    if isinstance(schema, dict):
        for k, v in schema.items():
            if k == "properties" and isinstance(v, dict):
                for name, sub in v.items():
                    out.add((path, f"properties.{name}"))
                    schema_keywords(sub, f"{path}/{name}", out)
            else:
                out.add((path, k))
                if isinstance(v, (dict, list)):
                    schema_keywords(v, f"{path}/{k}", out)
    elif isinstance(schema, list):
        for i, v in enumerate(schema):
            schema_keywords(v, f"{path}[{i}]", out)
    return out


def schema_diff(ours, offered):
    a, b = schema_keywords(ours), schema_keywords(offered)
    fmt = lambda s: sorted(f"{p or '/'}:{k}" for p, k in s)
    return {"dropped": fmt(a - b), "added": fmt(b - a)}


def declarations(body):
    out = []
    for t in body.get("tools") or []:
        out.extend(t.get("functionDeclarations") or [])
    return out


def is_main(body):
    return any(d.get("name", "").startswith(PREFIX) for d in declarations(body))


class Model:
    def __init__(self):
        self.lock = threading.Lock()
        self.requests = []  # (path, body)
        self.turn = 0

    def answer(self, path, body):
        with self.lock:
            self.requests.append({"path": path, "body": body})
            if not is_main(body):
                gc = body.get("generationConfig") or {}
                if gc.get("responseMimeType") == "application/json" or gc.get(
                    "responseJsonSchema"
                ) or gc.get("responseSchema"):
                    # Side calls (routing, next-speaker, loop checks) want JSON.
                    return [{"text": json.dumps({"reasoning": "scripted", "next_speaker": "user", "model_choice": "flash"})}]
                return [{"text": "ok"}]
            if self.turn < len(SCRIPT):
                name, args, _ = SCRIPT[self.turn]
                self.turn += 1
                return [{"functionCall": {"id": f"call_{self.turn:02d}", "name": PREFIX + name, "args": args}}]
            self.turn += 1
            return [{"text": FINAL_TEXT}]


def response_obj(parts):
    return {
        "candidates": [
            {
                "content": {"role": "model", "parts": parts},
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": {"promptTokenCount": 1, "candidatesTokenCount": 1, "totalTokenCount": 2},
        "modelVersion": "scripted",
    }


def serve(model):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def send(self, code, data, ctype="application/json"):
            self.send_response(code)
            self.send_header("content-type", ctype)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self):
            n = int(self.headers.get("content-length", "0"))
            raw = self.rfile.read(n) or b"{}"
            try:
                body = json.loads(raw)
            except ValueError:
                body = {"_raw": raw.decode(errors="replace")}
            path = self.path
            if ":countTokens" in path:
                model.requests.append({"path": path, "body": body})
                self.send(200, json.dumps({"totalTokens": 100}).encode())
                return
            if ":generateContent" in path or ":streamGenerateContent" in path:
                parts = model.answer(path, body)
                obj = response_obj(parts)
                if ":streamGenerateContent" in path:
                    self.send(200, f"data: {json.dumps(obj)}\r\n\r\n".encode(), "text/event-stream")
                else:
                    self.send(200, json.dumps(obj).encode())
                return
            model.requests.append({"path": path, "body": body, "unhandled": True})
            self.send(404, json.dumps({"error": {"code": 404, "message": "not scripted", "status": "NOT_FOUND"}}).encode())

        def do_GET(self):
            model.requests.append({"path": self.path, "method": "GET", "unhandled": True})
            self.send(404, b"{}")

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def function_responses(main_bodies):
    """Every functionResponse part the model was handed, by call id (or
    by order when the client drops ids), from the main conversation."""
    found = {}
    order = []
    for body in main_bodies:
        for c in body.get("contents", []):
            for p in c.get("parts", []) or []:
                fr = p.get("functionResponse")
                if fr is None:
                    continue
                key = fr.get("id") or f"#{len(order)}"
                if key not in found:
                    order.append(key)
                found[key] = fr
    return found, order


def classify(text, structured_json_texts):
    """Which rendering of our result the model reads."""
    inner = text
    wrapped = False
    if inner.startswith(UNTRUSTED_OPEN) and inner.endswith(UNTRUSTED_CLOSE):
        inner = inner[len(UNTRUSTED_OPEN) : -len(UNTRUSTED_CLOSE)]
        wrapped = True
    if inner.startswith("MCP tool '"):
        return "client error wrapper (JSON of the whole CallToolResult: content + structuredContent)", wrapped
    try:
        obj = json.loads(inner)
    except ValueError:
        obj = None
    if isinstance(obj, dict) and "ok" in obj:
        return "structuredContent JSON", wrapped
    return "content text", wrapped


def reexec_in_netns():
    """Re-run this script in a network namespace with loopback only."""
    if os.environ.get("CTM_NETNS") or not shutil.which("unshare") or not shutil.which("ip"):
        return
    probe = subprocess.run(["unshare", "-rn", "true"], capture_output=True)
    if probe.returncode != 0:
        return
    env = dict(os.environ, CTM_NETNS="1")
    cmd = ["unshare", "-rn", "sh", "-c", 'ip link set lo up && exec "$0" "$@"', sys.executable] + sys.argv
    sys.exit(subprocess.run(cmd, env=env).returncode)


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: gemini_cli.py GEMINI_BINARY SERVER_BINARY REPORT.json")
    for what, path in (("client", sys.argv[1]), ("server", sys.argv[2])):
        if not shutil.which(path):
            sys.exit(f"FAIL cannot run the %s binary {path!r} (not found or not executable)" % what)
    reexec_in_netns()
    mode = os.environ.get("CTM_GEMINI_MODE", "yolo")
    if mode not in MODES:
        sys.exit(f"CTM_GEMINI_MODE must be one of {', '.join(MODES)}")
    gemini, server, report_path = (
        os.path.abspath(sys.argv[1]) if os.sep in sys.argv[1] else sys.argv[1],
        os.path.abspath(sys.argv[2]),
        sys.argv[3],
    )
    ver = subprocess.run([gemini, "--version"], capture_output=True, text=True, timeout=120,
                         env={"PATH": os.environ.get("PATH", ""), "HOME": tempfile.gettempdir(), "GEMINI_CLI_NO_RELAUNCH": "true"})
    model = Model()
    httpd = serve(model)
    port = httpd.server_address[1]
    with tempfile.TemporaryDirectory() as t:
        ws = os.path.join(t, "ws")
        home = os.path.join(t, "home")
        os.makedirs(ws)
        os.makedirs(os.path.join(home, ".gemini"))
        big_bytes = make_workspace(ws)
        probe_ws = os.path.join(t, "probe_ws")
        make_workspace(probe_ws)
        init, our_tools, direct = probe_server(server, probe_ws)
        settings = {
            "mcpServers": {
                SERVER: {
                    "command": server,
                    "args": ["--workspace", ws, "--stdio", *SERVER_ARGS],
                    "trust": MODES[mode]["trust"],
                }
            },
            "security": {
                "auth": {"selectedType": "gemini-api-key"},
                "folderTrust": {"enabled": False},
            },
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False, "logPrompts": False},
            "general": {
                "enableAutoUpdate": False,
                "enableAutoUpdateNotification": False,
                "checkpointing": {"enabled": False},
            },
            "ide": {"enabled": False},
            "model": {"name": "gemini-2.5-flash"},
        }
        with open(os.path.join(home, ".gemini", "settings.json"), "w") as f:
            json.dump(settings, f, indent=2)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": home,
            "GOOGLE_GEMINI_BASE_URL": f"http://127.0.0.1:{port}",
            "GEMINI_API_KEY": "scripted-model-on-loopback",
            "GEMINI_CLI_NO_RELAUNCH": "true",
            "NO_COLOR": "1",
            "CI": "1",
            "TERM": "dumb",
        }
        cmd = [
            gemini,
            "-p",
            "Use the coding-tools server.",
            *MODES[mode]["flags"],
            "--allowed-mcp-server-names",
            SERVER,
            "--output-format",
            "json",
        ]
        try:
            run = subprocess.run(cmd, cwd=ws, env=env, capture_output=True, text=True, timeout=300)
        except subprocess.TimeoutExpired as e:
            run = subprocess.CompletedProcess(cmd, -1, e.stdout or "", (e.stderr or "") + "\nTIMEOUT")
            if isinstance(run.stdout, bytes):
                run.stdout = run.stdout.decode(errors="replace")
            if isinstance(run.stderr, bytes):
                run.stderr = run.stderr.decode(errors="replace")
        saved = []
        for root, _, files in os.walk(home):
            for fn in files:
                if "tool-outputs" in root:
                    saved.append(os.path.join(root, fn)[len(t):])
    httpd.shutdown()

    bodies = [r["body"] for r in model.requests if "body" in r]
    main_bodies = [b for b in bodies if is_main(b)]
    report = {
        "client": "gemini-cli",
        "client_version": ver.stdout.strip(),
        "network_isolated": bool(os.environ.get("CTM_NETNS")),
        "mode": mode,
        "command": [os.path.basename(cmd[0])] + cmd[1:],
        "env": {k: v for k, v in env.items() if k not in ("PATH", "HOME")},
        "settings": settings,
        "client_exit": run.returncode,
        "client_stdout": run.stdout[-3000:],
        "client_stderr": run.stderr[-3000:],
        "requests": [
            {"path": r["path"], "main": is_main(r.get("body") or {}), **({"unhandled": True} if r.get("unhandled") else {})}
            for r in model.requests
        ],
        "main_requests": len(main_bodies),
        "truncated_outputs_saved": saved,
    }
    failures = []
    if not main_bodies:
        failures.append("Gemini CLI sent no request declaring our MCP tools (could not drive the client)")
        report["failures"] = failures
        with open(report_path, "w") as f:
            json.dump(report, f, indent=2)
        print(json.dumps(report, indent=2)[-6000:])
        for fl in failures:
            print(f"FAIL {fl}")
        sys.exit(1)
    first = main_bodies[0]
    decls = declarations(first)
    ours = [d for d in decls if d.get("name", "").startswith(PREFIX)]
    ours_by_name = {t["name"]: t for t in our_tools}
    report["offered_tools"] = [
        {
            "name": d["name"],
            "description_identical": d.get("description") == ours_by_name.get(d["name"][len(PREFIX):], {}).get("description"),
            "schema_identical_to_inputSchema": (d.get("parametersJsonSchema") or d.get("parameters")) == ours_by_name.get(d["name"][len(PREFIX):], {}).get("inputSchema"),
            "keys": sorted(d.keys()),
            "schema_changes": schema_diff(ours_by_name.get(d["name"][len(PREFIX):], {}).get("inputSchema", {}), d.get("parametersJsonSchema") or d.get("parameters") or {}),
            "description_bytes": len((d.get("description") or "").encode()),
            "schema_key": next((k for k in ("parametersJsonSchema", "parameters") if k in d), None),
            "schema_bytes": len(json.dumps(d.get("parametersJsonSchema") or d.get("parameters") or {}).encode()),
            "declaration_bytes": len(json.dumps(d).encode()),
        }
        for d in ours
    ]
    report["offered_tool_names_ours"] = sorted(d["name"][len(PREFIX):] for d in ours)
    report["missing_of_ours"] = [n for n in OUR_TOOLS if n not in report["offered_tool_names_ours"]]
    report["builtin_tools"] = [d.get("name") for d in decls if not d.get("name", "").startswith(PREFIX)]
    report["tools_bytes_ours"] = len(json.dumps(ours).encode())
    report["our_annotations_and_meta_reach_model"] = any("annotations" in d or "_meta" in d for d in ours)
    report["schema_keywords_dropped"] = sorted({x.split(":", 1)[1] for o in report["offered_tools"] for x in o["schema_changes"]["dropped"]})
    report["schema_keywords_added"] = sorted({x for o in report["offered_tools"] for x in o["schema_changes"]["added"]})
    report["first_request"] = first
    frs, order = function_responses(main_bodies)
    calls = []
    for i, (name, args, label) in enumerate(SCRIPT, 1):
        fr = frs.get(f"call_{i:02d}") or (frs.get(order[i - 1]) if i - 1 < len(order) and order[i - 1].startswith("#") else None)
        c = {"label": label, "tool": name, "arguments": args}
        if fr is None:
            c["received"] = None
            calls.append(c)
            continue
        resp = fr.get("response") or {}
        key = next((k for k in ("output", "error") if k in resp), None)
        text = resp.get(key) if key else json.dumps(resp)
        if not isinstance(text, str):
            text = json.dumps(text)
        lens, wrapped = classify(text, None)
        res = direct[i - 1]
        content_text = "".join(b.get("text", "") for b in res.get("content", []) if b.get("type") == "text")
        structured = compact(res["structuredContent"]) if "structuredContent" in res else None
        c["our_server"] = {
            "isError": bool(res.get("isError")),
            "content_text_bytes": len(content_text.encode()),
            "structuredContent_json_bytes": None if structured is None else len(structured.encode()),
        }
        inner = text[len(UNTRUSTED_OPEN):-len(UNTRUSTED_CLOSE)] if wrapped else text
        norm = lambda x: re.sub(r"\b\d+ ms\b|\"(?:duration|elapsed)_ms\":\d+|[0-9a-f]{16}", "#", x or "")
        c["identical_to_content_text"] = norm(inner) == norm(content_text)
        c["identical_to_structuredContent"] = structured is not None and norm(inner) == norm(structured)
        c["refused_by_client"] = key == "error" and not text.startswith("MCP tool '")
        if text.startswith("MCP tool '") and " with response: " in text:
            try:
                wrapped_result = json.loads(text.split(" with response: ", 1)[1])[0]["functionResponse"]["response"]
            except (ValueError, LookupError, TypeError):
                wrapped_result = None
            c["error_wrapper"] = {
                "prefix": text.split(" with response: ", 1)[0] + " with response: ",
                "carries_our_content": bool(wrapped_result) and wrapped_result.get("content") == res.get("content"),
                "carries_our_structuredContent": bool(wrapped_result) and wrapped_result.get("structuredContent") == res.get("structuredContent"),
                "carries_isError": bool(wrapped_result) and wrapped_result.get("isError") is True,
            }
        c.update(
            {
                "function_response_name": fr.get("name"),
                "function_response_id": fr.get("id"),
                "response_keys": sorted(resp.keys()),
                "field": key,
                "is_error": key == "error",
                "bytes": len(text.encode()),
                "functionResponse_json_bytes": len(json.dumps(fr).encode()),
                "untrusted_context_wrapped": wrapped,
                "lens": lens,
                "truncated_by_client": "Output too large. Showing first" in text,
                "model_sees_continuation": "start_line=" in text or "next_start_line" in text,
                "head": text[:400],
                "tail": text[-300:],
                "has_revision": "revision" in text,
            }
        )
        calls.append(c)
    report["calls"] = calls
    last = main_bodies[-1]
    report["final_answer_reached"] = model.turn > len(SCRIPT)

    print(f"# Gemini CLI {report['client_version']} exit={run.returncode} ({len(model.requests)} requests, {len(main_bodies)} in the conversation, netns={report['network_isolated']})")
    print(f"our tools offered ({len(ours)}, {report['tools_bytes_ours']} bytes): {', '.join(d['name'] for d in ours)}")
    print(f"built-in tools offered: {', '.join(report['builtin_tools'])}")
    print(f"schema changes: dropped {report['schema_keywords_dropped']}, added {report['schema_keywords_added']}")
    for c in calls:
        if c.get("bytes") is None:
            print(f"- {c['label']}: NOT RECEIVED")
            continue
        print(
            f"- {c['label']}: response.{c['field']} {c['bytes']} bytes, {c['lens']}"
            f"{', wrapped in <untrusted_context>' if c['untrusted_context_wrapped'] else ''}"
            f"{', TRUNCATED BY CLIENT' if c['truncated_by_client'] else ''}"
            f"{' = our content text' if c['identical_to_content_text'] else ''}"
            f"{' = our structuredContent' if c['identical_to_structuredContent'] else ''}"
            f"; our server: content {c['our_server']['content_text_bytes']} B, structuredContent {c['our_server']['structuredContent_json_bytes']} B"
        )
    for n in OUR_TOOLS:
        if n not in report["offered_tool_names_ours"]:
            failures.append(f"{n} was not offered to the model")
    for c in calls:
        if c.get("bytes") is None:
            failures.append(f"no function response reached the model for: {c['label']}")
        elif c.get("refused_by_client"):
            failures.append(f"Gemini CLI did not run {c['tool']} ({c['label']}): {c['head'][:300]!r}")
    big = calls[2]
    if big.get("bytes") is not None:
        if big["is_error"]:
            failures.append(f"the {big_bytes}-byte file with defaults came back as an error: {big['head'][:200]!r}")
        elif not big["model_sees_continuation"]:
            failures.append("the large file's page, as the model got it, names no continuation")
    if not report["final_answer_reached"]:
        failures.append("the conversation did not reach the scripted final answer")
    if CATALOG_05 and not (calls and calls[0].get("has_revision")):
        failures.append("catalog 0.5: the read's revision does not reach the model")
    report["failures"] = failures
    with open(report_path, "w") as f:
        json.dump(report, f, indent=2)
    for c in calls:
        if c.get("truncated_by_client"):
            print(f"NOTE Gemini CLI cut {c['label']} to {c['bytes']} bytes (head 20% + tail 80%, full text saved to a file)")
    for fl in failures:
        print(f"FAIL {fl}")
    if failures:
        sys.exit(1)
    print("gemini-cli: all checks passed")


if __name__ == "__main__":
    main()
