// A real OAuth 2.0 / OpenID Connect provider (the certified `oidc-provider`
// package) on loopback, for the resource-server tests of --oauth-issuer.
//
// Usage: node oidc_issuer.mjs   (from a directory whose node_modules holds
// oidc-provider; cargo xtask ci installs it into target/node)
//
// It prints one line, `issuer http://127.0.0.1:<port>`, and serves until
// stdin closes. Configuration:
// - one public client, `ctm-test`, redirect URI http://127.0.0.1:9/callback,
//   authorization code only, PKCE required (S256);
// - resource indicators (RFC 8707) on: a `resource` naming
//   http://127.0.0.1:<port>/mcp gets a JWT access token (RFC 9068, RS256,
//   `typ: at+jwt`) whose `aud` is that resource, with scope `mcp`;
// - no login page: GET /interaction/<uid> signs in the account `tester`
//   at once, and consent is granted automatically (loadExistingGrant), so a
//   client that follows redirects and keeps cookies gets its code;
// - POST /rotate starts signing with a new RSA key (new `kid`); the JWKS
//   then lists the new key first and the old one after it.

import http from 'node:http';
import { generateKeyPairSync, randomUUID } from 'node:crypto';
import Provider, { errors } from 'oidc-provider';

const REDIRECT = 'http://127.0.0.1:9/callback';
const RESOURCE = /^http:\/\/127\.0\.0\.1:\d+\/mcp$/;

function rsaKey() {
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  return { ...privateKey.export({ format: 'jwk' }), kid: randomUUID(), alg: 'RS256', use: 'sig' };
}

function configuration(keys) {
  return {
    clients: [{
      client_id: 'ctm-test',
      token_endpoint_auth_method: 'none',
      redirect_uris: [REDIRECT],
      grant_types: ['authorization_code'],
      response_types: ['code'],
    }],
    jwks: { keys },
    pkce: { required: () => true },
    cookies: { keys: ['ctm-test-cookie-key'] },
    scopes: ['openid'],
    findAccount: (ctx, id) => ({ accountId: id, claims: () => ({ sub: id }) }),
    interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
    // Consent without a page: grant what was asked for.
    async loadExistingGrant(ctx) {
      const grant = new ctx.oidc.provider.Grant({
        clientId: ctx.oidc.client.clientId,
        accountId: ctx.oidc.session.accountId,
      });
      if (ctx.oidc.requestParamScopes.has('openid')) {
        grant.addOIDCScope('openid');
      }
      for (const resource of [].concat(ctx.oidc.params.resource || [])) {
        grant.addResourceScope(resource, 'mcp');
      }
      await grant.save();
      return grant;
    },
    features: {
      devInteractions: { enabled: false },
      resourceIndicators: {
        enabled: true,
        defaultResource: () => undefined,
        useGrantedResource: () => true,
        getResourceServerInfo(ctx, resourceIndicator) {
          if (!RESOURCE.test(resourceIndicator)) {
            throw new errors.InvalidTarget();
          }
          return {
            scope: 'mcp',
            audience: resourceIndicator,
            accessTokenTTL: 300,
            accessTokenFormat: 'jwt',
            jwt: { sign: { alg: 'RS256' } },
          };
        },
      },
    },
  };
}

let provider;
let keys = [rsaKey()];
const server = http.createServer(async (req, res) => {
  try {
    const url = new URL(req.url, 'http://x');
    if (req.method === 'POST' && url.pathname === '/rotate') {
      keys = [rsaKey(), keys[0]];
      provider = new Provider(provider.issuer, configuration(keys));
      const body = JSON.stringify({ kid: keys[0].kid });
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
      res.end(body);
      return;
    }
    if (req.method === 'GET' && url.pathname.startsWith('/interaction/')) {
      const details = await provider.interactionDetails(req, res);
      const result = details.prompt.name === 'login'
        ? { login: { accountId: 'tester' } }
        : { consent: {} };
      await provider.interactionFinished(req, res, result, { mergeWithLastSubmission: true });
      return;
    }
    provider.callback()(req, res);
  } catch (e) {
    res.writeHead(500, { 'content-type': 'text/plain' });
    res.end(String(e && e.stack || e));
  }
});

server.listen(0, '127.0.0.1', () => {
  const issuer = `http://127.0.0.1:${server.address().port}`;
  provider = new Provider(issuer, configuration(keys));
  process.stdout.write(`issuer ${issuer}\n`);
});

// A reader that went away is no reason to stop serving.
process.stdout.on('error', () => {});
// The test that started us ends us by closing stdin (or killing us).
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
