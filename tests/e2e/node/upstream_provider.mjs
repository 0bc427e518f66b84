// A real OpenID Connect provider (node-oidc-provider) for the federated sign-in tests: the
// upstream identity provider people sign in with before mcpauth's consent page.
//
//   node upstream_provider.mjs <peers> <port> <name> <client_id> <client_secret> <redirect_uri>[,...]
//
// <peers> holds node_modules/ with oidc-provider (scripts/ensure-npm-peers.sh prints it).
// One confidential client (client_secret_basic, authorization code + PKCE, RS256 ID tokens that
// carry the profile and email claims). Its own sign-in page is oidc-provider's devInteractions
// form: any login name with any password signs in as that account; the known accounts below
// have fixed claims, any other name has only `sub`. No consent page: the grant is given on sign-in.
// Cookie names carry <name>, so two instances on 127.0.0.1 (cookies ignore the port) keep apart.
// Refresh tokens (rotated) for a request asking offline_access with prompt=consent, which then
// shows oidc-provider's own consent page; the revocation endpoint is on. The environment
// variable UPSTREAM_ACCESS_TOKEN_TTL sets the access tokens' lifetime in seconds (default 3600).
//
// Prints "ready <issuer>" on stdout once listening.
import * as crypto from 'node:crypto';
import * as http from 'node:http';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const [peers, port, name, clientId, clientSecret, redirectUris] = process.argv.slice(2);
if (!redirectUris) {
  console.error('usage: node upstream_provider.mjs <peers> <port> <name> <client_id> <client_secret> <redirect_uri>[,...]');
  process.exit(2);
}
const entry = join(peers, 'node_modules', 'oidc-provider', 'lib', 'index.js');
const { default: Provider } = await import(pathToFileURL(entry).href);
const issuer = `http://127.0.0.1:${port}`;

const ACCOUNTS = {
  alice: { email: 'alice@example.com', email_verified: true, name: 'Alice Example', groups: ['mcp-users'] },
  bob: { email: 'bob@example.com', email_verified: true, name: 'Bob Example', groups: ['staff'] },
  mallory: { email: 'mallory@other.example', email_verified: true, name: 'Mallory Other' },
  eve: { email: 'eve@example.com', email_verified: false, name: 'Eve Unverified' },
};

const { privateKey } = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
const signing = { ...privateKey.export({ format: 'jwk' }), alg: 'RS256', use: 'sig', kid: `${name}-rs256` };

const provider = new Provider(issuer, {
  clients: [
    {
      client_id: clientId,
      client_secret: clientSecret,
      token_endpoint_auth_method: 'client_secret_basic',
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      redirect_uris: redirectUris.split(','),
      id_token_signed_response_alg: 'RS256',
    },
  ],
  jwks: { keys: [signing] },
  scopes: ['openid', 'offline_access', 'email', 'profile', 'groups'],
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['name'],
    groups: ['groups'],
  },
  // the requested claims in the ID token itself, as Google, Entra ID, Okta and Keycloak do
  conformIdTokenClaims: false,
  async findAccount(ctx, id) {
    return {
      accountId: id,
      async claims() {
        return { sub: id, ...(ACCOUNTS[id] || {}) };
      },
    };
  },
  ttl: { AccessToken: Number(process.env.UPSTREAM_ACCESS_TOKEN_TTL || 3600) },
  // sign-in grants what was asked: no consent page at the provider (unless prompt=consent)
  async loadExistingGrant(ctx) {
    const grant = new ctx.oidc.provider.Grant({
      clientId: ctx.oidc.client.clientId,
      accountId: ctx.oidc.session.accountId,
    });
    grant.addOIDCScope('openid email profile groups');
    if (ctx.oidc.params.scope?.split(' ').includes('offline_access')) {
      grant.addOIDCScope('offline_access');
    }
    grant.addOIDCClaims(['email', 'email_verified', 'name', 'groups']);
    await grant.save();
    return grant;
  },
  cookies: {
    keys: [crypto.randomBytes(32).toString('base64url')],
    names: { session: `_session_${name}`, interaction: `_interaction_${name}`, resume: `_resume_${name}` },
  },
  pkce: { required: () => true },
  features: {
    devInteractions: { enabled: true },
    introspection: { enabled: false },
    revocation: { enabled: true },
  },
});
provider.proxy = false;
provider.on('server_error', (ctx, err) => {
  console.error('server_error', err);
});

const server = http.createServer(provider.callback());
server.listen(Number(port), '127.0.0.1', () => {
  process.stdout.write(`ready ${issuer}\n`);
});

for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => {
    server.close(() => process.exit(0));
    server.closeAllConnections();
  });
}
