// HTTPS and sandbox hostnames: getHost(port) names a host that reaches
// the sandbox through Cube's HTTPS listener, whose certificate chains to
// the local CA; other names are refused. Runs in both modes of the suite.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import { Sandbox } from 'e2b'
import { Tracker, api, caFile, eventually } from './helpers.mjs'

const run = promisify(execFile)
const tracker = new Tracker()
const PORT = 8000
const body = 'served over https\n'
let sbx

before(async () => {
  sbx = tracker.add(await Sandbox.create())
  await sbx.files.write('/home/user/site/hello.txt', body)
  await sbx.commands.run(`python3 -m http.server ${PORT} --directory /home/user/site`, { background: true })
  await eventually(async () => (await fetch(`https://${sbx.getHost(PORT)}/hello.txt`).catch(() => null))?.status === 200,
    { what: 'the sandbox web server over https' })
})
after(() => tracker.killAll(Sandbox))

test('the create response names this server\'s domain, so getHost reaches Cube', async () => {
  const host = sbx.getHost(PORT)
  assert.match(host, new RegExp(`^${PORT}-${sbx.sandboxId}\\.[a-z0-9.-]+\\.localhost:\\d+$`))
  const res = await fetch(`https://${host}/hello.txt`)
  assert.equal(res.status, 200)
  assert.equal(await res.text(), body)
})

test('curl --cacert reaches https://<port>-<id>.<domain> and refuses a name the certificate lacks', async () => {
  const host = sbx.getHost(PORT)
  const { stdout } = await run('curl', ['-sS', '--cacert', caFile, `https://${host}/hello.txt`])
  assert.equal(stdout, body)
  // The same listener under a name outside the domain: no certificate.
  const port = host.split(':').pop()
  await assert.rejects(
    run('curl', ['-sS', '--cacert', caFile, '--resolve', `wrong.example:${port}:127.0.0.1`, `https://wrong.example:${port}/health`]),
    (err) => { assert.notEqual(err.code, 0); return true })
})

test('HTTP/2 is offered on the HTTPS listener', async () => {
  const { stdout } = await run('curl', ['-sS', '--http2', '--cacert', caFile, '-o', '/dev/null', '-w', '%{http_version}', `https://${sbx.getHost(PORT)}/hello.txt`])
  assert.equal(stdout, '2')
})

test('the CA the server serves is the one clients trust', async () => {
  const res = await api('GET', '/tls/ca.pem', undefined, { key: 'not-needed' })
  assert.equal(res.status, 200)
  assert.equal(res.text, fs.readFileSync(caFile, 'utf8'))
  assert.match(res.text, /^-----BEGIN CERTIFICATE-----/)
})
