// node-oidc-provider peer for bench/client_credentials/run.py: client_credentials only, one
// confidential client (client_secret_basic), JWT access tokens (ES256) for one resource.
//
//   node provider.mjs <port> <client_id> <client_secret> <resource> <scope>
//
// Prints "ready <issuer>" on stdout once listening; logs nothing per request.
import * as crypto from 'node:crypto';
import * as http from 'node:http';

import Provider from 'oidc-provider';

const [port, clientId, clientSecret, resource, scope] = process.argv.slice(2);
if (!scope) {
  console.error('usage: node provider.mjs <port> <client_id> <client_secret> <resource> <scope>');
  process.exit(2);
}
const issuer = `http://127.0.0.1:${port}`;

const { privateKey } = crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' });
const signing = { ...privateKey.export({ format: 'jwk' }), alg: 'ES256', use: 'sig', kid: 'es256-bench' };

const provider = new Provider(issuer, {
  clients: [
    {
      client_id: clientId,
      client_secret: clientSecret,
      token_endpoint_auth_method: 'client_secret_basic',
      grant_types: ['client_credentials'],
      response_types: [],
      redirect_uris: [],
      scope,
    },
  ],
  jwks: { keys: [signing] },
  scopes: [scope],
  // no cookie-based flows are used; keys are still required outside development
  cookies: { keys: [crypto.randomBytes(32).toString('base64url')] },
  features: {
    devInteractions: { enabled: false },
    clientCredentials: { enabled: true },
    introspection: { enabled: false },
    revocation: { enabled: false },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => resource,
      useGrantedResource: () => true,
      getResourceServerInfo: (ctx, indicator) => {
        if (indicator !== resource) {
          throw new Provider.errors.InvalidTarget();
        }
        return {
          scope,
          audience: resource,
          accessTokenTTL: 3600,
          accessTokenFormat: 'jwt',
          jwt: { sign: { alg: 'ES256' } },
        };
      },
    },
  },
  ttl: { ClientCredentials: 3600 },
  clientDefaults: { id_token_signed_response_alg: 'ES256' },
});
provider.proxy = false;
// errors are counted by the load generator; keep the process quiet per request
provider.removeAllListeners('server_error');
provider.on('server_error', (ctx, err) => {
  console.error('server_error', err);
});

const server = http.createServer(provider.callback());
server.keepAliveTimeout = 65_000;
server.listen(Number(port), '127.0.0.1', () => {
  process.stdout.write(`ready ${issuer}\n`);
});

for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => {
    server.close(() => process.exit(0));
    server.closeAllConnections();
  });
}
