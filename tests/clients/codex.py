"""What OpenAI Codex CLI hands its model of our tools, watched through the
real client with a scripted model on loopback (modelled on claude_code.py).

Usage: codex.py CODEX_BINARY SERVER_BINARY REPORT.json

A small HTTP server on 127.0.0.1 plays the OpenAI Responses API
(POST /v1/responses, SSE; `wire_api = "chat"` is no longer accepted by
Codex): it records every request Codex sends and answers the main
conversation with scripted output items, one per turn. Codex runs
`codex exec` with a throwaway HOME/CODEX_HOME whose config.toml defines a
custom model provider (base_url on loopback, env_key with a fake key,
wire_api = "responses"), our server as its only MCP server, analytics and
update checks off, and approvals/sandbox bypassed so MCP tools run.

Codex defers every MCP tool behind its client-executed `tool_search`
tool (the model is only told "Deferred tool namespaces: mcp__coding_tools:
<our server instructions>"), so the script's first turn is a
`tool_search_call`; the namespace Codex answers with is what the model
gets to see of our tools. Then come the scripted calls, sent as
`function_call` items with `namespace = "mcp__coding_tools"`.

When `unshare -rn` works, the whole run is re-executed inside a fresh
network namespace with only loopback, so nothing can leave the machine.

The report says, per scripted call, exactly what the model was handed as
the `function_call_output` (bytes), which rendering of our result it is
(our `content` text or our `structuredContent` JSON, compared byte for
byte against a direct tools/call to our server), what Codex wrapped
around it, and whether Codex truncated it; plus what Codex offered the
model of our tools (names, namespace, schemas and their sizes).
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
# Codex: namespace "mcp__" + server name with '-' turned into '_'.
NAMESPACE = "mcp__coding_tools"
MODEL = "gpt-5.5"  # a slug in Codex's bundled model catalog

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

SEARCH = {"query": "coding tools read file exec command", "limit": 20}
SCRIPT = [
    ("read_file", {"path": "small.txt"}, "read a 25-byte file"),
    ("exec_command", {"cmd": "echo hi; exit 3"}, "a failing command"),
    ("read_file", {"path": "big.txt"}, "read a 430 KB file with defaults"),
    ("read_file", {"path": "missing.txt"}, "a NOT_FOUND error"),
]
FINAL_TEXT = "done"
# How codex exec is let run MCP tools (CTM_CODEX_MODE picks one).
MODES = {
    "bypass": ["--dangerously-bypass-approvals-and-sandbox"],
    "workspace-write": ["--sandbox", "workspace-write", "-c", 'approval_policy="never"'],
    "read-only": ["--sandbox", "read-only", "-c", 'approval_policy="never"'],
    # Sandboxed, MCP tools pre-approved for this server.
    "workspace-write-approve": [
        "--sandbox", "workspace-write", "-c", 'approval_policy="never"',
        "-c", f'mcp_servers.{SERVER}.default_tools_approval_mode="approve"',
    ],
}
# Codex wraps every MCP result it hands the model in "Wall time: ...".
WRAPPER = re.compile(r"^Wall time: [0-9.]+ seconds\nOutput:\n?", re.S)


def make_workspace(ws):
    os.makedirs(ws, exist_ok=True)
    with open(os.path.join(ws, "small.txt"), "w") as f:
        f.write("hello from a small file\n")
    with open(os.path.join(ws, "big.txt"), "w") as f:
        for i in range(1, 6233):
            f.write(f"line {i:05d} of a large file: " + "x" * 40 + "\n")
    return os.path.getsize(os.path.join(ws, "big.txt"))


def compact(obj):
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def probe_server(server, ws):
    """Ask our server directly (tools/list, the scripted tools/call), so the
    client's rendering can be compared with what our server answered."""
    p = subprocess.Popen(
        [server, "--workspace", ws, "--stdio", *SERVER_ARGS],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )

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
        results = []
        for k, (name, args, _) in enumerate(SCRIPT):
            results.append(rpc(10 + k, "tools/call", {"name": name, "arguments": args})["result"])
    finally:
        p.stdin.close()
        p.wait(timeout=30)
    return init["result"], tools, results


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


class Model:
    def __init__(self):
        self.lock = threading.Lock()
        self.requests = []
        self.turn = 0

    def answer(self, body):
        with self.lock:
            self.requests.append(body)
            if not body.get("tools"):
                return [message_item("ok")]
            t = self.turn
            self.turn += 1
            if t == 0:
                return [{"type": "tool_search_call", "call_id": "search_1", "execution": "client", "status": "completed", "arguments": SEARCH}]
            if t <= len(SCRIPT):
                name, args, _ = SCRIPT[t - 1]
                return [{"type": "function_call", "call_id": f"call_{t:02d}", "name": name, "namespace": NAMESPACE, "arguments": json.dumps(args)}]
            return [message_item(FINAL_TEXT)]


def message_item(text):
    return {"type": "message", "role": "assistant", "id": "msg_scripted", "content": [{"type": "output_text", "text": text, "annotations": []}]}


def sse(items):
    events = [{"type": "response.created", "response": {"id": "resp_scripted"}}]
    for i, it in enumerate(items):
        events.append({"type": "response.output_item.done", "output_index": i, "item": it})
    events.append(
        {
            "type": "response.completed",
            "response": {
                "id": "resp_scripted",
                "usage": {
                    "input_tokens": 1,
                    "input_tokens_details": {"cached_tokens": 0},
                    "output_tokens": 1,
                    "output_tokens_details": {"reasoning_tokens": 0},
                    "total_tokens": 2,
                },
            },
        }
    )
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


def serve(model, log):
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
            raw = self.rfile.read(n)
            enc = (self.headers.get("content-encoding") or "").lower()
            if enc == "gzip":
                import gzip

                raw = gzip.decompress(raw)
            elif enc:
                log.append({"method": "POST", "path": self.path, "unhandled": f"content-encoding {enc}"})
                self.send(415, b'{"error":{"message":"unsupported content-encoding"}}')
                return
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = {}
            if self.path.split("?")[0].endswith("/responses"):
                log.append({"method": "POST", "path": self.path, "main": bool(body.get("tools"))})
                self.send(200, sse(model.answer(body)), "text/event-stream")
                return
            log.append({"method": "POST", "path": self.path, "unhandled": True})
            self.send(404, b'{"error":{"message":"not scripted"}}')

        def do_GET(self):
            log.append({"method": "GET", "path": self.path, "unhandled": True})
            self.send(404, b'{"error":{"message":"not scripted"}}')

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def reexec_in_netns():
    if os.environ.get("CTM_NETNS") or not shutil.which("unshare") or not shutil.which("ip"):
        return
    if subprocess.run(["unshare", "-rn", "true"], capture_output=True).returncode != 0:
        return
    env = dict(os.environ, CTM_NETNS="1")
    cmd = ["unshare", "-rn", "sh", "-c", 'ip link set lo up && exec "$0" "$@"', sys.executable] + sys.argv
    sys.exit(subprocess.run(cmd, env=env).returncode)


def toml_str(s):
    return json.dumps(s)  # a JSON string is a valid TOML basic string


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: codex.py CODEX_BINARY SERVER_BINARY REPORT.json")
    for what, path in (("client", sys.argv[1]), ("server", sys.argv[2])):
        if not shutil.which(path):
            sys.exit(f"FAIL cannot run the %s binary {path!r} (not found or not executable)" % what)
    reexec_in_netns()
    codex = os.path.abspath(sys.argv[1]) if os.sep in sys.argv[1] else sys.argv[1]
    server, report_path = os.path.abspath(sys.argv[2]), sys.argv[3]
    mode = os.environ.get("CTM_CODEX_MODE", "bypass")
    if mode not in MODES:
        sys.exit(f"CTM_CODEX_MODE must be one of {', '.join(MODES)}")
    log = []
    model = Model()
    httpd = serve(model, log)
    port = httpd.server_address[1]
    with tempfile.TemporaryDirectory() as t:
        ws = os.path.join(t, "ws")
        home = os.path.join(t, "home")
        codex_home = os.path.join(home, ".codex")
        os.makedirs(codex_home)
        big_bytes = make_workspace(ws)
        # The same calls straight to our server, in a copy of the workspace.
        probe_ws = os.path.join(t, "probe_ws")
        make_workspace(probe_ws)
        init, our_tools, direct = probe_server(server, probe_ws)
        config = f"""# written by codex.py: a scripted model on loopback, nothing else
model = {toml_str(MODEL)}
model_provider = "scripted"
check_for_update_on_startup = false

[analytics]
enabled = false

[model_providers.scripted]
name = "scripted"
base_url = {toml_str(f"http://127.0.0.1:{port}/v1")}
env_key = "SCRIPTED_MODEL_API_KEY"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0

[mcp_servers.{SERVER}]
command = {toml_str(server)}
args = [{", ".join(toml_str(a) for a in ["--workspace", ws, "--stdio", *SERVER_ARGS])}]
"""
        # Extra top-level TOML for experiments, e.g. tool_output_token_limit = 50000.
        extra = os.environ.get("CTM_CODEX_EXTRA_CONFIG", "")
        if extra:
            config = extra.rstrip("\n") + "\n\n" + config
        with open(os.path.join(codex_home, "config.toml"), "w") as f:
            f.write(config)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": home,
            "CODEX_HOME": codex_home,
            "SCRIPTED_MODEL_API_KEY": "sk-scripted-model-on-loopback",
            "NO_COLOR": "1",
            "RUST_LOG": "warn",
        }
        ver = subprocess.run([codex, "--version"], capture_output=True, text=True, env=env, timeout=60)
        cmd = [
            codex,
            "exec",
            "--skip-git-repo-check",
            "--ephemeral",
            "--json",
            "--color",
            "never",
        ] + MODES[mode] + ["Use the coding-tools server."]
        try:
            run = subprocess.run(cmd, cwd=ws, env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
            run = subprocess.CompletedProcess(cmd, -1, out, err + "\nTIMEOUT after 300 s")
    httpd.shutdown()

    main_bodies = [b for b in model.requests if b.get("tools")]
    report = {
        "client": "codex",
        "client_version": ver.stdout.strip(),
        "network_isolated": bool(os.environ.get("CTM_NETNS")),
        "mode": mode,
        "command": [os.path.basename(cmd[0])] + cmd[1:],
        "config_toml": config.replace(server, "SERVER_BINARY"),
        "client_exit": run.returncode,
        "client_stdout_jsonl": run.stdout[-6000:],
        "client_stderr": run.stderr[-3000:],
        "http_requests": log,
        "main_requests": len(main_bodies),
        "our_server_instructions": init.get("instructions"),
    }
    failures = []
    if not main_bodies:
        failures.append("Codex sent no Responses request with tools (could not drive the client)")
        report["failures"] = failures
        with open(report_path, "w") as f:
            json.dump(report, f, indent=2)
        print(json.dumps(report, indent=2)[-5000:])
        for fl in failures:
            print(f"FAIL {fl}")
        sys.exit(1)

    first = main_bodies[0]
    first_json = json.dumps(first)
    report["first_request_tools"] = [t.get("name") or t.get("type") for t in first.get("tools", [])]
    # Codex's own exec_command, write_stdin, apply_patch and view_image share
    # names with ours; ours would come under our namespace.
    report["ours_in_first_request_tools"] = [
        t.get("name") for t in first.get("tools", []) if NAMESPACE in json.dumps(t)
    ]
    m = re.search(r"Deferred tool namespaces:\\n(.*?)</tools>", first_json)
    report["deferred_namespaces_prompt"] = json.loads(f'"{m.group(1)}"') if m else None
    report["first_request"] = first

    # What tool_search handed the model: the namespace with our tools.
    search_output = None
    for body in main_bodies:
        for it in body.get("input", []):
            if it.get("type") == "tool_search_output" and it.get("call_id") == "search_1":
                search_output = it
    ours_by_name = {t["name"]: t for t in our_tools}
    offered = []
    if search_output:
        for ns in search_output.get("tools", []):
            if ns.get("name") != NAMESPACE:
                continue
            report["namespace_description"] = ns.get("description")
            for fn in ns.get("tools", []):
                orig = ours_by_name.get(fn.get("name"), {})
                offered.append(
                    {
                        "name": fn.get("name"),
                        "defer_loading": fn.get("defer_loading"),
                        "strict": fn.get("strict"),
                        "description_identical": fn.get("description") == orig.get("description"),
                        "schema_bytes": len(compact(fn.get("parameters", {})).encode()),
                        "schema_changes": schema_diff(orig.get("inputSchema", {}), fn.get("parameters", {})),
                        "our_input_schema_bytes": len(compact(orig.get("inputSchema", {})).encode()),
                        "function_bytes": len(compact(fn).encode()),
                    }
                )
        report["tool_search_output_bytes"] = len(compact(search_output.get("tools", [])).encode())
        report["tool_search_output"] = search_output.get("tools")
    report["offered_tools"] = offered
    report["schema_keywords_dropped"] = sorted({x.split(":", 1)[1] for o in offered for x in o["schema_changes"]["dropped"]})
    report["schema_keywords_added"] = sorted({x.split(":", 1)[1] for o in offered for x in o["schema_changes"]["added"]})
    report["descriptions_identical"] = all(o["description_identical"] for o in offered)
    offered_names = sorted(o["name"] for o in offered)
    report["offered_tool_names_ours"] = offered_names

    outputs = {}
    for body in main_bodies:
        for it in body.get("input", []):
            if it.get("type") in ("function_call_output", "custom_tool_call_output"):
                outputs[it.get("call_id")] = it
    calls = []
    for i, (name, args, label) in enumerate(SCRIPT, 1):
        c = {"label": label, "tool": name, "arguments": args}
        it = outputs.get(f"call_{i:02d}")
        res = direct[i - 1]
        content_text = "".join(b.get("text", "") for b in res.get("content", []) if b.get("type") == "text")
        structured = compact(res["structuredContent"]) if "structuredContent" in res else None
        c["our_server"] = {
            "isError": bool(res.get("isError")),
            "content_text_bytes": len(content_text.encode()),
            "structuredContent_json_bytes": None if structured is None else len(structured.encode()),
        }
        if it is None:
            c["received"] = None
            calls.append(c)
            continue
        out = it.get("output")
        if isinstance(out, list):
            c["output_form"] = "content items"
            text = "".join(x.get("text", "") for x in out if isinstance(x, dict))
        else:
            c["output_form"] = "string"
            text = out if isinstance(out, str) else json.dumps(out)
        wm = WRAPPER.match(text)
        body = text[wm.end():] if wm else text
        c["bytes"] = len(text.encode())
        c["wrapper"] = wm.group(0) if wm else None
        c["payload_bytes"] = len(body.encode())
        try:
            obj = json.loads(body)
        except ValueError:
            obj = None
        if isinstance(obj, dict) and "ok" in obj:
            c["lens"] = "structuredContent JSON"
        elif body.strip() and content_text and content_text[:40] in body:
            c["lens"] = "content text"
        else:
            c["lens"] = "other"
        # Exact comparison with our server's direct answer (exec timings vary).
        norm = lambda s: re.sub(r"\b\d+ ms\b|\"(?:duration|elapsed)_ms\":\d+|[0-9a-f]{16}", "#", s or "")
        c["identical_to_structuredContent"] = structured is not None and norm(body) == norm(structured)
        c["identical_to_content_text"] = norm(body) == norm(content_text)
        tm = re.search(r"[^\n]{0,60}(?:tokens truncated|chars truncated|truncated output|<truncated)[^\n]{0,60}", text)
        c["truncated_by_client"] = bool(tm)
        if tm:
            c["truncation_marker"] = tm.group(0)
            c["payload_valid_json"] = obj is not None
            c["model_sees_next_start_line"] = '"next_start_line":' in text
            c["full_output"] = text
        c["refused_by_client"] = "requires approval" in text[:300]
        c["head"] = text[:400]
        c["tail"] = text[-400:]
        c["has_revision"] = "revision" in text
        calls.append(c)
    report["calls"] = calls
    report["final_answer_reached"] = model.turn > len(SCRIPT) + 1
    events = []
    for line in run.stdout.splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        item = ev.get("item") or {}
        if ev.get("type") == "item.completed" and item.get("type") == "mcp_tool_call":
            events.append({"tool": item.get("tool"), "status": item.get("status"), "error": item.get("error")})
    report["exec_mcp_tool_call_events"] = events

    print(f"# Codex {report['client_version']} exit={run.returncode} ({len(log)} HTTP requests, {len(main_bodies)} in the conversation, netns={report['network_isolated']})")
    print(f"tools in the first request: {', '.join(report['first_request_tools'])}")
    print(f"our tools in the first request: {', '.join(report['ours_in_first_request_tools']) or '(none: deferred behind tool_search)'}")
    print(f"deferred namespaces prompt: {report['deferred_namespaces_prompt']!r}")
    print(f"tool_search answered namespace {NAMESPACE} with {len(offered)} tools ({report.get('tool_search_output_bytes')} bytes)")
    print(f"schema changes: dropped {report['schema_keywords_dropped']}, added {report['schema_keywords_added']}; descriptions identical: {report['descriptions_identical']}")
    for c in calls:
        if c.get("bytes") is None:
            print(f"- {c['label']}: NOT RECEIVED")
            continue
        print(
            f"- {c['label']}: {c['bytes']} bytes ({c['payload_bytes']} after the wrapper {c['wrapper']!r}), {c['lens']}"
            f"{' = our structuredContent' if c['identical_to_structuredContent'] else ''}"
            f"{' = our content text' if c['identical_to_content_text'] else ''}"
            f"{', TRUNCATED BY CLIENT' if c['truncated_by_client'] else ''}"
            f"; our server: content {c['our_server']['content_text_bytes']} B, structuredContent {c['our_server']['structuredContent_json_bytes']} B"
        )
    for n in OUR_TOOLS:
        if n not in offered_names:
            failures.append(f"{n} was not offered to the model (by tool_search)")
    for c in calls:
        if c.get("bytes") is None:
            failures.append(f"no function_call_output reached the model for: {c['label']}")
        elif c.get("refused_by_client"):
            failures.append(f"Codex refused to run {c['tool']} ({c['label']}): {c['head']!r}")
    big = calls[2]
    if big.get("bytes") is not None:
        full = big["head"] + big["tail"]
        if "next_start_line" not in full and "start_line=" not in full:
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
            print(f"NOTE Codex truncated: {c['label']}")
    for fl in failures:
        print(f"FAIL {fl}")
    if failures:
        sys.exit(1)
    print("codex: all checks passed")


if __name__ == "__main__":
    main()
