// The official TypeScript SDK client (@modelcontextprotocol/client) with an OAuth client provider
// whose state lives in a JSON file, so running this script again is a restart of the client.
//
//   node mcp_oauth_client.mjs --peers DIR --server URL --store FILE [--call TOOL]... [--timeout S]
//
// DIR holds node_modules/ (scripts/ensure-npm-peers.sh prints it). The script listens for the
// authorization redirect on 127.0.0.1 (an ephemeral port, RFC 8252 §7.3), connects, calls each
// TOOL in order and exits. It writes one JSON object per line on stdout, never a token or a code:
//   {"event":"authorize","url":...}        the SDK sends the user to this URL (someone must go)
//   {"event":"callback","params":[...]}    the browser came back (the parameter names)
//   {"event":"token","grant_type":...,"status":...}   a request to the token endpoint
//   {"event":"http","method":...,"url":...,"status":...,"www_authenticate":...}  any 4xx/5xx
//   {"event":"tool","name":...,"text":...,"is_error":...}
//   {"event":"done"}
// Failures go to stderr with exit status 1; every wait is bounded by --timeout.

import { randomBytes } from "node:crypto";
import { existsSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { pathToFileURL } from "node:url";

const { values: options } = parseArgs({
  options: {
    peers: { type: "string" },
    server: { type: "string" },
    store: { type: "string" },
    call: { type: "string", multiple: true, default: [] },
    timeout: { type: "string", default: "60" },
  },
});
for (const name of ["peers", "server", "store"]) {
  if (!options[name]) throw new Error(`--${name} is required`);
}
const TIMEOUT_MS = Number(options.timeout) * 1000;

const emit = (event) => process.stdout.write(JSON.stringify(event) + "\n");

// The package is installed outside this folder: import its ES module entry point by path.
async function importPeer(name) {
  const root = join(options.peers, "node_modules", name);
  const manifest = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
  return import(pathToFileURL(join(root, manifest.exports["."].import.default)).href);
}
const { Client, StreamableHTTPClientTransport, UnauthorizedError } = await importPeer(
  "@modelcontextprotocol/client",
);

// -------------------------------------------------------------------------------------------
// the loopback redirect listener

const callbacks = [];
let wake = () => {};
const listener = createServer((request, response) => {
  const url = new URL(request.url, "http://127.0.0.1");
  if (request.method !== "GET" || url.pathname !== "/callback") {
    response.writeHead(404).end();
    return;
  }
  response.writeHead(200, { "content-type": "text/html; charset=utf-8", "cache-control": "no-store" });
  response.end("<!doctype html><title>Signed in</title><p>You can close this window.");
  callbacks.push(url.searchParams);
  wake();
});
await new Promise((resolve) => listener.listen(0, "127.0.0.1", resolve));
const redirectUrl = `http://127.0.0.1:${listener.address().port}/callback`;

async function nextCallback() {
  const deadline = Date.now() + TIMEOUT_MS;
  while (callbacks.length === 0) {
    const left = deadline - Date.now();
    if (left <= 0) throw new Error(`no authorization callback within ${options.timeout} s`);
    await new Promise((resolve) => {
      const timer = setTimeout(resolve, left);
      wake = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }
  return callbacks.shift();
}

// -------------------------------------------------------------------------------------------
// the OAuth client provider, its state in one JSON file (mode 0600, replaced atomically)

class FileOAuthProvider {
  constructor(path) {
    this.path = path;
  }

  read() {
    return existsSync(this.path) ? JSON.parse(readFileSync(this.path, "utf8")) : {};
  }

  update(changes) {
    const next = { ...this.read(), ...changes };
    for (const [key, value] of Object.entries(changes)) if (value === undefined) delete next[key];
    const temporary = `${this.path}.${process.pid}.tmp`;
    writeFileSync(temporary, JSON.stringify(next, null, 2), { mode: 0o600 });
    renameSync(temporary, this.path);
  }

  get redirectUrl() {
    return redirectUrl;
  }

  get clientMetadata() {
    return {
      client_name: "mcpauth e2e: official TypeScript SDK client",
      redirect_uris: [redirectUrl],
      grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"],
      token_endpoint_auth_method: "none",
    };
  }

  state() {
    const state = randomBytes(24).toString("base64url");
    this.update({ state });
    return state;
  }

  clientInformation() {
    return this.read().client;
  }

  saveClientInformation(client) {
    this.update({ client });
  }

  tokens() {
    return this.read().tokens;
  }

  saveTokens(tokens) {
    this.update({ tokens });
  }

  redirectToAuthorization(url) {
    emit({ event: "authorize", url: url.href });
  }

  saveCodeVerifier(codeVerifier) {
    this.update({ codeVerifier });
  }

  codeVerifier() {
    const { codeVerifier } = this.read();
    if (!codeVerifier) throw new Error("no PKCE code verifier was saved");
    return codeVerifier;
  }

  saveDiscoveryState(discovery) {
    this.update({ discovery });
  }

  discoveryState() {
    return this.read().discovery;
  }

  invalidateCredentials(scope) {
    const drop = {
      all: ["client", "tokens", "codeVerifier", "discovery"],
      client: ["client"],
      tokens: ["tokens"],
      verifier: ["codeVerifier"],
      discovery: ["discovery"],
    }[scope];
    this.update(Object.fromEntries(drop.map((key) => [key, undefined])));
  }
}

const provider = new FileOAuthProvider(options.store);

// Every request the SDK makes (MCP and OAuth alike) goes through this fetch: token requests and
// refusals are reported, bodies and tokens never are.
async function observedFetch(input, init = {}) {
  const url = String(input instanceof Request ? input.url : input);
  const method = init.method ?? (input instanceof Request ? input.method : "GET");
  const response = await fetch(input, init);
  const grant = method === "POST" ? new URLSearchParams(String(init.body)).get("grant_type") : null;
  if (grant) {
    emit({ event: "token", grant_type: grant, status: response.status });
  } else if (response.status >= 400) {
    const challenge = response.headers.get("www-authenticate");
    emit({ event: "http", method, url, status: response.status, www_authenticate: challenge });
  }
  return response;
}

// -------------------------------------------------------------------------------------------
// connect, call, and finish an authorization whenever the SDK asks for one

function newTransport() {
  return new StreamableHTTPClientTransport(new URL(options.server), {
    authProvider: provider,
    fetch: observedFetch,
  });
}

async function finishAuthorization(transport) {
  const params = await nextCallback();
  emit({ event: "callback", params: [...params.keys()].sort() });
  const expected = provider.read().state;
  if (!expected || params.get("state") !== expected) {
    throw new Error("the authorization response has a missing or wrong state");
  }
  provider.update({ state: undefined });
  await transport.finishAuth(params); // checks iss (RFC 9207), redeems the code with PKCE
}

async function connect() {
  for (let attempt = 0; attempt < 2; attempt++) {
    const transport = newTransport();
    const client = new Client({ name: "mcpauth-e2e-typescript", version: "1.0.0" });
    try {
      await client.connect(transport);
      return { client, transport };
    } catch (error) {
      if (!(error instanceof UnauthorizedError)) throw error;
      await finishAuthorization(transport);
    }
  }
  throw new Error("still unauthorized after an authorization");
}

async function callTool(connection, name) {
  try {
    return await connection.client.callTool({ name, arguments: {} });
  } catch (error) {
    if (!(error instanceof UnauthorizedError)) throw error;
    // a step-up (403 insufficient_scope): the SDK sent the user to consent to more scope
    await finishAuthorization(connection.transport);
    return await connection.client.callTool({ name, arguments: {} });
  }
}

const watchdog = setTimeout(() => {
  process.stderr.write(`gave up after ${options.timeout} s\n`);
  process.exit(1);
}, 3 * TIMEOUT_MS);

try {
  const connection = await connect();
  for (const name of options.call) {
    const result = await callTool(connection, name);
    const text = result.content?.map((part) => part.text ?? "").join("") ?? "";
    emit({ event: "tool", name, text, is_error: Boolean(result.isError) });
  }
  await connection.client.close();
  emit({ event: "done" });
} catch (error) {
  process.stderr.write(`${error?.stack ?? error}\n`);
  process.exitCode = 1;
} finally {
  clearTimeout(watchdog);
  listener.close();
}
