// The official TypeScript MCP client (@modelcontextprotocol/client) against
// the real coding-tools-mcp binary: legacy, pinned 2026-07-28 and auto
// negotiation, over stdio and Streamable HTTP. Each check initializes or
// discovers, lists the tools and calls real ones.
//
// Usage: node ts_client.mjs /path/to/coding-tools-mcp
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';

const binary = process.argv[2];
const ws = mkdtempSync(join(tmpdir(), 'ctm-ts-'));
writeFileSync(join(ws, 'AGENTS.md'), '# Rules\nKeep tests green.\n');
writeFileSync(join(ws, 'app.py'), 'def main():\n    return 1\n');

function assert(cond, what) {
  if (!cond) throw new Error(`assertion failed: ${what}`);
}

// More server arguments for every start (CI: `--catalog 0.5`): the stdio
// transport passes the server no environment of ours.
const serverArgs = (process.env.CTM_SERVER_ARGS || '').split(/\s+/).filter(Boolean);

function startHttp() {
  return new Promise((resolve, reject) => {
    const proc = spawn(binary, ['--workspace', ws, '--port', '0', ...serverArgs], { stdio: ['ignore', 'ignore', 'pipe'] });
    let buf = '';
    proc.stderr.on('data', (d) => {
      buf += d.toString();
      const m = buf.match(/serving MCP on (http:\/\/\S+\/mcp)/);
      if (m) resolve({ proc, url: m[1] });
    });
    proc.on('exit', (c) => reject(new Error(`server exited ${c}: ${buf}`)));
  });
}

async function exercise(transport, mode, expectModern) {
  const client = new Client({ name: 'ctm-ci', version: '1.0.0' }, { versionNegotiation: { mode } });
  await client.connect(transport);
  try {
    const era = client.getProtocolEra();
    assert(era === (expectModern ? 'modern' : 'legacy'), `expected the ${expectModern ? 'modern' : 'legacy'} era, got ${era}`);
    const { tools } = await client.listTools();
    assert(tools.length === 18, `18 tools, got ${tools.length}`);
    assert(tools.some((t) => t.name === 'apply_changes') === serverArgs.includes('0.5'), 'the catalog asked for');
    const read = await client.callTool({ name: 'read_file', arguments: { path: 'AGENTS.md' } });
    assert(!read.isError && read.structuredContent.content.includes('Keep tests green'), 'read_file');
    const search = await client.callTool({ name: 'search_text', arguments: { query: 'return 1' } });
    assert(!search.isError && search.structuredContent.matches.length === 1, 'search_text');
    const patch = '*** Begin Patch\n*** Update File: app.py\n@@\n-    return 1\n+    return 2\n*** End Patch\n';
    const dry = await client.callTool({ name: 'apply_patch', arguments: { patch, dry_run: true } });
    assert(!dry.isError && dry.structuredContent.dry_run === true && dry.structuredContent.files[0].would_change, 'apply_patch dry run');
    const exec = await client.callTool({ name: 'exec_command', arguments: { cmd: 'echo from-ts' } });
    assert(!exec.isError && exec.structuredContent.stdout === 'from-ts\n', 'exec_command');
  } finally {
    await client.close();
  }
}

const modes = [
  ['legacy', 'legacy', false],
  ['2026-07-28', { pin: '2026-07-28' }, true],
  // auto probes server/discover first, which this server answers: modern.
  ['auto', 'auto', true],
];
let failures = 0;
let passed = 0;
const http = await startHttp();
try {
  for (const transportName of ['stdio', 'http']) {
    for (const [label, mode, modern] of modes) {
      const name = `ts-client ${transportName} mode=${label}`;
      try {
        const transport =
          transportName === 'stdio'
            ? new StdioClientTransport({ command: binary, args: ['--stdio', '--workspace', ws, ...serverArgs], stderr: 'ignore' })
            : new StreamableHTTPClientTransport(new URL(http.url));
        await exercise(transport, mode, modern);
        passed++;
        console.log(`PASS ${name}`);
      } catch (e) {
        failures++;
        console.log(`FAIL ${name}: ${e?.stack ?? e}`);
      }
    }
  }
} finally {
  http.proc.kill('SIGTERM');
}
console.log(`${passed} passed, ${failures} failed`);
process.exit(failures ? 1 : 0);
