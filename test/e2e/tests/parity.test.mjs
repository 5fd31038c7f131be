// Details E2B's SDKs and their users rely on, each as E2B behaves: the
// template's tools (sudo for the sandbox user, git, python), and request
// validation before lookups.
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'
import { Tracker, eventually, rawRequest } from './helpers.mjs'

const tracker = new Tracker()
after(() => tracker.killAll(Sandbox))

test('the sandbox user becomes root with sudo, without a password', async () => {
  const sbx = tracker.add(await Sandbox.create())
  const r = await sbx.commands.run('sudo -n whoami')
  assert.equal(r.stdout, 'root\n')
  // Per-command environment variables stay with their command.
  const scoped = await sbx.commands.run('echo "$FOO"', { envs: { FOO: 'bar' } })
  assert.equal(scoped.stdout, 'bar\n')
  assert.equal((await sbx.commands.run('sudo echo "$FOO"')).stdout, '\n')
  await sbx.kill()
})

test('git and the tools E2B\'s template has are there', async () => {
  const sbx = tracker.add(await Sandbox.create())
  for (const tool of ['git --version', 'curl --version', 'ss -V', 'pgrep -V', 'python3 --version']) {
    const r = await sbx.commands.run(tool)
    assert.equal(r.exitCode, 0, tool)
  }
  await sbx.git.init('/home/user/repo')
  const st = await sbx.git.status('/home/user/repo')
  assert.ok(st, 'git status of a new repository')
  await sbx.kill()
})

test('a fork count below 1 is refused as a bad request, whatever the sandbox', async () => {
  await assert.rejects(Sandbox.fork('sbx-test', { count: 0 }), (err) => {
    assert.equal(err.statusCode, 400, String(err))
    assert.match(err.message, /count must be between 1 and/)
    return true
  })
})

test('maskRequestHost replaces the Host a sandbox\'s server sees, port filled in', async () => {
  const sbx = tracker.add(await Sandbox.create({ network: { maskRequestHost: 'masked.example:${PORT}' } }))
  const server = [
    'import http.server',
    'class H(http.server.BaseHTTPRequestHandler):',
    '    def do_GET(self):',
    '        b = self.headers.get("Host", "").encode()',
    '        self.send_response(200); self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)',
    'http.server.HTTPServer(("0.0.0.0", 8123), H).serve_forever()',
  ].join('\n')
  await sbx.files.write('/home/user/host.py', server)
  await sbx.commands.run('python3 /home/user/host.py', { background: true })
  const seen = await eventually(async () => {
    const r = await rawRequest('/', { headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '8123' } })
    return r.status === 200 && r.body.toString()
  }, { what: 'the server in the sandbox answers' })
  assert.equal(seen, 'masked.example:8123')
  await sbx.kill()
})

test('httpsPorts: a port whose server speaks HTTPS with its own certificate is reached through the proxy', async () => {
  const sbx = tracker.add(await Sandbox.create({ network: { httpsPorts: [8443] } }))
  await sbx.commands.run('openssl req -x509 -newkey rsa:2048 -nodes -keyout /home/user/k.pem -out /home/user/c.pem -days 1 -subj /CN=sandbox 2>/dev/null')
  const server = [
    'import http.server, ssl',
    'class H(http.server.BaseHTTPRequestHandler):',
    '    def do_GET(self):',
    '        b = b"served over TLS"',
    '        self.send_response(200); self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)',
    's = http.server.HTTPServer(("0.0.0.0", 8443), H)',
    'c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); c.load_cert_chain("/home/user/c.pem", "/home/user/k.pem")',
    's.socket = c.wrap_socket(s.socket, server_side=True)',
    's.serve_forever()',
  ].join('\n')
  await sbx.files.write('/home/user/tls.py', server)
  await sbx.commands.run('python3 /home/user/tls.py', { background: true })
  const body = await eventually(async () => {
    const r = await rawRequest('/', { headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '8443' } })
    return r.status === 200 && r.body.toString()
  }, { what: 'the HTTPS server in the sandbox answers through the proxy' })
  assert.equal(body, 'served over TLS')
  await assert.rejects(Sandbox.create({ network: { httpsPorts: [49983] } }), (err) => {
    assert.match(err.message, /httpsPorts/)
    return true
  })
  await sbx.kill()
})
