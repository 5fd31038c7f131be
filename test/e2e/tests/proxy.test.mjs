// Reaching a server started inside a sandbox through the cube-server
// listener: by E2b-Sandbox-Id/-Port headers and by Host
// <port>-<sandboxID>.<domain>, as sandbox.getHost(port) names it.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'
import { Tracker, apiUrl, eventually, rawRequest, runTag } from './helpers.mjs'

const tracker = new Tracker()
let sbx
let server

const PORT = 8000
const body = `served from the sandbox ${runTag}\n`

before(async () => {
  sbx = tracker.add(await Sandbox.create())
  await sbx.files.write('/home/user/site/hello.txt', body)
  server = await sbx.commands.run(`python3 -m http.server ${PORT} --bind 0.0.0.0`, { background: true, cwd: '/home/user/site' })
  await eventually(async () => {
    const r = await rawRequest('/hello.txt', { headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': String(PORT) } })
    return r.status === 200
  }, { what: 'the web server in the sandbox to answer', timeoutMs: 60_000 })
})
after(() => tracker.killAll(Sandbox))

test('headers route to the port of the sandbox', async () => {
  const r = await rawRequest('/hello.txt', { headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': String(PORT) } })
  assert.equal(r.status, 200)
  assert.equal(r.body.toString(), body)
  const listing = await rawRequest('/', { headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': String(PORT) } })
  assert.equal(listing.status, 200)
  assert.match(listing.body.toString(), /hello\.txt/)
})

test('plain fetch with the headers works too', async () => {
  // E2B_SANDBOX_URL when the suite has one, else the API listener (HTTPS).
  const res = await fetch(`${process.env.E2B_SANDBOX_URL ?? apiUrl}/hello.txt`, {
    headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': String(PORT) },
  })
  assert.equal(res.status, 200)
  assert.equal(await res.text(), body)
})

test('the Host that getHost(port) names routes to the same server', async () => {
  const host = sbx.getHost(PORT)
  assert.match(host, new RegExp(`^${PORT}-${sbx.sandboxId}\\.`))
  const r = await rawRequest('/hello.txt', { headers: { Host: host } })
  assert.equal(r.status, 200, r.body.toString())
  assert.equal(r.body.toString(), body)
})

test('a POST body reaches the sandbox and the answer comes back', async () => {
  // A server that echoes what it was sent: the body arrived whole. (A
  // server that answers without reading the body, as http.server does with
  // 501, may reset the connection under the answer; the proxy's unit tests
  // cover what Cube does then.)
  const ECHO = 8001
  const echo = [
    'import http.server',
    'class H(http.server.BaseHTTPRequestHandler):',
    '    def do_POST(self):',
    '        b = self.rfile.read(int(self.headers.get("Content-Length", "0")))',
    '        self.send_response(200); self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)',
    `http.server.HTTPServer(("0.0.0.0", ${ECHO}), H).serve_forever()`,
  ].join('\n')
  await sbx.files.write('/home/user/echo.py', echo)
  await sbx.commands.run('python3 /home/user/echo.py', { background: true })
  const sent = `x=1&tag=${runTag}&` + 'y'.repeat(100_000)
  const r = await eventually(async () => {
    const r = await rawRequest('/anything', {
      method: 'POST', body: sent,
      headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': String(ECHO), 'Content-Type': 'text/plain' },
    })
    return r.status === 200 && r
  }, { what: 'the echo server in the sandbox to answer' })
  assert.equal(r.body.toString(), sent)
})

test('a port nothing listens on is a 502 in E2B\'s words, with the port', async () => {
  const r = await rawRequest('/', { headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '8999' } })
  assert.equal(r.status, 502)
  const json = JSON.parse(r.body.toString())
  assert.deepEqual(json, { sandboxId: sbx.sandboxId, message: 'The sandbox is running but port is not open', port: 8999, code: 502 })
})

test('an unknown sandbox is a 502 naming it', async () => {
  const id = `nosuch${runTag}`
  for (const headers of [
    { 'E2b-Sandbox-Id': id, 'E2b-Sandbox-Port': String(PORT) },
    { Host: `${PORT}-${id}.${sbx.getHost(PORT).split('.').slice(1).join('.')}` },
  ]) {
    const r = await rawRequest('/', { headers })
    assert.equal(r.status, 502, JSON.stringify(headers))
    const json = JSON.parse(r.body.toString())
    assert.equal(json.code, 502)
    assert.equal(json.sandboxId, id)
    assert.equal(json.message, 'The sandbox was not found', 'E2B\'s words, which users match on')
  }
})

test('a killed sandbox is no longer reachable', async () => {
  const other = tracker.add(await Sandbox.create())
  await other.commands.run(`python3 -m http.server ${PORT}`, { background: true })
  const headers = { 'E2b-Sandbox-Id': other.sandboxId, 'E2b-Sandbox-Port': String(PORT) }
  await eventually(async () => (await rawRequest('/', { headers })).status === 200, { what: 'the second server', timeoutMs: 60_000 })
  await other.kill()
  const r = await rawRequest('/', { headers })
  assert.equal(r.status, 502)
  assert.equal(JSON.parse(r.body.toString()).sandboxId, other.sandboxId)
  // The first sandbox's server is unaffected.
  const r2 = await rawRequest('/hello.txt', { headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': String(PORT) } })
  assert.equal(r2.body.toString(), body)
  assert.ok(server.pid > 0)
})
