"""The official MCP Python SDK against the real coding-tools-mcp binary.

Usage: python sdk_clients.py /path/to/coding-tools-mcp

For each client mode (legacy handshake, auto probe, pinned 2026-07-28) over
stdio and over Streamable HTTP: connect, list the tools, call server_info and
check its structured result, and check that a refused call comes back as a
tool error. Prints one line per check and exits non-zero on any failure.
"""

import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile

from mcp import Client
from mcp.client.stdio import StdioServerParameters

MODES = ["legacy", "auto", "2026-07-28"]
EXPECTED_TOOLS = 18
# More server arguments for every start (CI: `--catalog 0.5`); the stdio
# transport passes the server no environment of ours, so not a variable.
SERVER_ARGS = os.environ.get("CTM_SERVER_ARGS", "").split()


def structured(result):
    value = getattr(result, "structured_content", None)
    if value is None:
        value = getattr(result, "structuredContent", None)
    return value


async def exercise(target, mode, workspace):
    async with Client(target, mode=mode, read_timeout_seconds=30) as client:
        tools = await client.list_tools()
        names = [t.name for t in tools.tools]
        assert len(names) == EXPECTED_TOOLS, names
        assert names[0] == "server_info" and "apply_patch" in names, names
        assert ("apply_changes" in names) == ("0.5" in SERVER_ARGS), names
        info = await client.call_tool("server_info", {})
        assert not info.is_error, info
        data = structured(info)
        assert data["ok"] is True, data
        assert data["tool_count"] == EXPECTED_TOOLS, data
        assert os.path.samefile(data["workspace"], workspace), data["workspace"]
        assert "2026-07-28" in data["supported_protocol_versions"], data
        refused = await client.call_tool("read_file", {"path": 5})
        assert refused.is_error, refused
        assert structured(refused)["error"]["code"] == "INVALID_ARGUMENT", structured(refused)
        read = await client.call_tool("read_file", {"path": "AGENTS.md"})
        assert not read.is_error and "Keep tests green" in structured(read)["content"], read
        found = await client.call_tool("search_text", {"query": "return 1"})
        assert not found.is_error and len(structured(found)["matches"]) == 1, structured(found)
        patch = "*** Begin Patch\n*** Update File: app.py\n@@\n-    return 1\n+    return 2\n*** End Patch\n"
        dry = await client.call_tool("apply_patch", {"patch": patch, "dry_run": True})
        plan = structured(dry)
        assert not dry.is_error and plan["dry_run"] is True and plan["files"][0]["would_change"], plan
        ran = await client.call_tool("exec_command", {"cmd": "echo from-python"})
        assert not ran.is_error and structured(ran)["stdout"] == "from-python\n", structured(ran)


def check_era(trace_path, mode, start=0):
    """The server's own trace, from byte `start` on, says which era each
    request arrived in."""
    with open(trace_path) as f:
        f.seek(start)
        events = [json.loads(line) for line in f if '"event":"request"' in line]
    methods = [e["method"] for e in events]
    eras = {e["era"] for e in events if e["method"] != "initialize"}
    assert "tools/call" in methods, methods
    if mode == "legacy":
        assert methods[0] == "initialize" and eras == {"handshake"}, (methods, eras)
    elif mode == "2026-07-28":
        assert "initialize" not in methods and eras == {"2026-07-28"}, (methods, eras)
    else:
        assert methods[0] == "server/discover" and eras == {"2026-07-28"}, (methods, eras)


def start_http(binary, workspace, trace_path):
    proc = subprocess.Popen(
        [binary, "--workspace", workspace, "--port", "0", "--trace", "--trace-file", trace_path, *SERVER_ARGS],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    for line in proc.stderr:
        m = re.search(r"serving MCP on (http://\S+/mcp)", line)
        if m:
            return proc, m.group(1)
    raise RuntimeError("the HTTP server did not announce its address")


async def main(binary):
    failures = 0
    with tempfile.TemporaryDirectory() as workspace:
        with open(os.path.join(workspace, "AGENTS.md"), "w") as f:
            f.write("# Rules\nKeep tests green.\n")
        with open(os.path.join(workspace, "app.py"), "w") as f:
            f.write("def main():\n    return 1\n")
        for transport in ["stdio", "http"]:
            for mode in MODES:
                label = f"python-sdk {transport} mode={mode}"
                trace = os.path.join(workspace, f".trace-{transport}-{mode}.jsonl")
                proc = None
                try:
                    if transport == "http":
                        proc, target = start_http(binary, workspace, trace)
                    else:
                        args = ["--stdio", "--workspace", workspace, "--trace", "--trace-file", trace, *SERVER_ARGS]
                        target = StdioServerParameters(command=binary, args=args)
                    await asyncio.wait_for(exercise(target, mode, workspace), timeout=60)
                    check_era(trace, mode)
                    print(f"PASS {label}")
                except BaseException as e:  # noqa: BLE001 - report every failure and go on
                    failures += 1
                    print(f"FAIL {label}: {type(e).__name__}: {e!r}")
                finally:
                    if proc is not None:
                        proc.terminate()
                        proc.wait(timeout=10)
    total = 2 * len(MODES)
    print(f"{total - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1])))
