"""The official MCP Python SDK through nginx, to two coding-tools-mcp backends.

Usage: python proxy_clients.py PROXY_BASE NAME=WORKSPACE=TRACE [NAME=WORKSPACE=TRACE ...]

`cargo xtask proxy` starts the backends (with CODING_TOOLS_MCP_TRUST_PROXY_HEADERS)
and nginx routing PROXY_BASE/w/NAME/ to each. For each route and each client
mode (legacy handshake, auto probe, pinned 2026-07-28): connect through the
proxy, check the backend's own workspace, start a command with a short yield
and poll it to its end with write_stdin through the same route, and check in
the backend's trace that the requests arrived in the mode's era. A command of
one route is unknown on the other. Prints one line per check and exits
non-zero on any failure.
"""

import asyncio
import json
import os
import sys

from mcp import Client

from sdk_clients import check_era

MODES = ["legacy", "auto", "2026-07-28"]


def structured(result):
    value = getattr(result, "structured_content", None)
    if value is None:
        value = getattr(result, "structuredContent", None)
    return value


async def exercise(url, mode, name, workspace):
    """Returns the command_id of a command this route started."""
    async with Client(url, mode=mode, read_timeout_seconds=30) as client:
        tools = await client.list_tools()
        assert "exec_command" in [t.name for t in tools.tools], tools
        info = structured(await client.call_tool("server_info", {}))
        assert info["ok"] is True, info
        assert os.path.samefile(info["workspace"], workspace), (info["workspace"], workspace)
        read = structured(await client.call_tool("read_file", {"path": "route.txt"}))
        assert read["content"] == f"{name}\n", read
        started = structured(
            await client.call_tool(
                "exec_command", {"cmd": f"sleep 1; echo polled-{name}", "yield_time_ms": 100}
            )
        )
        assert started["status"] == "running", started
        command_id = started["command_id"]
        for _ in range(10):
            polled = structured(
                await client.call_tool(
                    "write_stdin", {"command_id": command_id, "chars": "", "yield_time_ms": 5000}
                )
            )
            assert polled["command_id"] == command_id, polled
            if polled["status"] != "running":
                break
        assert polled["status"] != "running" and polled["exit_code"] == 0, polled
        assert polled["stdout"] == f"polled-{name}\n", polled
        return command_id


async def unknown_elsewhere(url, command_id):
    async with Client(url, mode="2026-07-28", read_timeout_seconds=30) as client:
        other = await client.call_tool(
            "write_stdin", {"command_id": command_id, "chars": "", "yield_time_ms": 0}
        )
        assert other.is_error, other
        assert structured(other)["error"]["code"] == "COMMAND_NOT_FOUND", structured(other)



def trace_size(path):
    return os.path.getsize(path) if os.path.exists(path) else 0


async def main(base, routes):
    failures = 0
    checks = 0
    started = {}
    for name, workspace, trace in routes:
        url = f"{base}/w/{name}/mcp"
        for mode in MODES:
            checks += 1
            label = f"python-sdk via nginx /w/{name} mode={mode}"
            try:
                start = trace_size(trace)
                started[name] = await asyncio.wait_for(exercise(url, mode, name, workspace), timeout=90)
                check_era(trace, mode, start)
                print(f"PASS {label}")
            except BaseException as e:  # noqa: BLE001 - report every failure and go on
                failures += 1
                print(f"FAIL {label}: {type(e).__name__}: {e!r}")
    for (name, _, _), (other, _, _) in zip(routes, routes[1:] + routes[:1]):
        if name == other or name not in started:
            continue
        checks += 1
        label = f"a command of /w/{name} is unknown on /w/{other}"
        try:
            await asyncio.wait_for(unknown_elsewhere(f"{base}/w/{other}/mcp", started[name]), 30)
            print(f"PASS {label}")
        except BaseException as e:  # noqa: BLE001
            failures += 1
            print(f"FAIL {label}: {type(e).__name__}: {e!r}")
    print(f"{checks - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    routes = [tuple(arg.split("=", 2)) for arg in sys.argv[2:]]
    sys.exit(asyncio.run(main(sys.argv[1].rstrip("/"), routes)))
