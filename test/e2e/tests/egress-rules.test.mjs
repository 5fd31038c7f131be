// Credentials without exposure: a secret made with the SDK's Secret is set
// as a header on a sandbox's HTTPS requests to a host with a network rule,
// by the server's egress filter, and the sandbox never holds it; over
// plain HTTP such a request is refused, and rules without secrets apply. The outside
// host is a web server in a network namespace of this test's own, on a
// TEST-NET address the host routes to (so it needs root, as the suite
// does); it records the Authorization headers it receives, and the test
// reads them from the host.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync, spawn } from 'node:child_process'
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Sandbox, Secret, SecretNotFoundError } from 'e2b'
import { Tracker, api, eventually, rejection, runTag } from './helpers.mjs'

const tracker = new Tracker()
const octet = 100 + (parseInt(runTag.slice(0, 4), 16) % 150)
const ip = `203.0.113.${octet}`
const link = `198.18.${octet}`
const ns = `e2eg${runTag.slice(0, 6)}`
const hostIf = `${ns}h`
const secretName = `vendor-key-${runTag}`
const secretValue = `sk-e2e-${runTag}-${Date.now().toString(36)}-not-in-the-sandbox`
let dir
let server

const sh = (...args) => execFileSync(args[0], args.slice(1), { stdio: 'pipe' })

// The outside web server: HTTP on :80 and, with a certificate nobody
// trusts, HTTPS on :443; GET /_seen lists "host authorization" per request.
const serverCode = `
import http from 'node:http'
import https from 'node:https'
import { readFileSync } from 'node:fs'
const seen = []
const handler = (req, res) => {
  if (req.url === '/_seen') { res.end(JSON.stringify(seen)); return }
  seen.push(req.headers.host + ' ' + (req.headers.authorization ?? ''))
  res.end('served ' + req.url.split('?')[0])
}
http.createServer(handler).listen(80, process.argv[2])
https.createServer({ key: readFileSync(process.argv[3] + '/key.pem'), cert: readFileSync(process.argv[3] + '/cert.pem') }, handler).listen(443, process.argv[2])
console.log('listening')
`

async function seen() {
  const res = await fetch(`http://${ip}/_seen`)
  return res.json()
}

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'cube-e2e-egress-'))
  writeFileSync(join(dir, 'server.mjs'), serverCode)
  sh('openssl', 'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-days', '1',
    '-subj', '/CN=api.rules.test', '-addext', 'subjectAltName=DNS:api.rules.test',
    '-keyout', join(dir, 'key.pem'), '-out', join(dir, 'cert.pem'))
  sh('ip', 'netns', 'add', ns)
  sh('ip', 'link', 'add', hostIf, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns)
  sh('ip', 'addr', 'add', `${link}.1/30`, 'dev', hostIf)
  sh('ip', 'link', 'set', hostIf, 'up')
  sh('ip', '-n', ns, 'addr', 'add', `${link}.2/30`, 'dev', 'eth0')
  sh('ip', '-n', ns, 'addr', 'add', `${ip}/32`, 'dev', 'eth0')
  sh('ip', '-n', ns, 'link', 'set', 'eth0', 'up')
  sh('ip', '-n', ns, 'link', 'set', 'lo', 'up')
  sh('ip', '-n', ns, 'route', 'add', 'default', 'via', `${link}.1`)
  sh('ip', 'route', 'add', `${ip}/32`, 'via', `${link}.2`)
  server = spawn('ip', ['netns', 'exec', ns, process.execPath, join(dir, 'server.mjs'), ip, dir], { stdio: ['ignore', 'pipe', 'inherit'] })
  await eventually(async () => Array.isArray(await seen()), { what: 'the outside server to listen' })
})

after(async () => {
  await tracker.killAll(Sandbox)
  await Secret.destroy(secretName).catch(() => {})
  server?.kill()
  for (const args of [['ip', 'route', 'del', `${ip}/32`], ['ip', 'link', 'del', hostIf], ['ip', 'netns', 'del', ns]]) {
    try { sh(...args) } catch { /* already gone */ }
  }
  if (dir) rmSync(dir, { recursive: true, force: true })
})

const rules = (auth) => ({ 'api.rules.test': [{ transform: { headers: { Authorization: auth } } }] })
// get runs curl in the sandbox (its host name resolved to the outside
// server, as --resolve does) and returns the status and the body.
async function get(sbx, scheme, path) {
  const run = await sbx.commands.run(
    `curl -s -o /tmp/body -w '%{http_code}\\n' --resolve api.rules.test:80:${ip} --resolve api.rules.test:443:${ip} ` +
    `-H 'Authorization: Bearer from-the-sandbox' ${scheme}://api.rules.test${path}; cat /tmp/body`)
  const nl = run.stdout.indexOf('\n')
  return { code: run.stdout.slice(0, nl), body: run.stdout.slice(nl + 1) }
}

test('secrets: created, read back without their value, updated, destroyed', async () => {
  const info = await Secret.create(secretName, secretValue, { metadata: { team: 'e2e' } })
  assert.match(info.secretId, /^sec_/)
  assert.equal(info.name, secretName)
  assert.equal(info.version, 1)
  assert.deepEqual(info.metadata, { team: 'e2e' })
  assert.equal((await Secret.getInfo(info.secretId)).name, secretName)
  assert.ok(await Secret.exists(secretName))
  const listed = await Secret.list().nextItems()
  assert.ok(listed.some((s) => s.secretId === info.secretId))
  for (const path of ['/secrets', `/secrets/${secretName}`, `/secrets/${info.secretId}`]) {
    const r = await api('GET', path)
    assert.equal(r.status, 200)
    assert.ok(!r.text.includes(secretValue), `${path} answered the value`)
  }
  const dup = await api('POST', '/secrets', { name: secretName, value: 'x' })
  assert.equal(dup.status, 409, dup.text)
  const big = await api('POST', '/secrets', { name: `big-${runTag}`, value: 'x'.repeat(9000) })
  assert.equal(big.status, 400, big.text)
  assert.match(big.json.message, /value/)
  const err = await rejection(Secret.update(`missing-${runTag}`, 'v'))
  assert.ok(err instanceof SecretNotFoundError, String(err))
})

test('a rule sets a secret as a header on the way out; the sandbox never holds it', async () => {
  const sbx = tracker.add(await Sandbox.create({ network: { rules: rules(`Bearer ${Secret.fill(secretName)}`) } }))
  const before = (await seen()).length

  // Plain HTTP: a secret never goes out in clear; the request is refused
  // and nothing reaches the server.
  const plain = await get(sbx, 'http', '/v1/models?key=q')
  assert.equal(plain.code, '403', plain.body)
  assert.match(plain.body, /only over HTTPS/)
  assert.ok(!plain.body.includes(secretValue))

  // HTTPS: curl trusts the egress CA (CURL_CA_BUNDLE points at it), and
  // the server's certificate, which nobody trusts, is refused upstream:
  // a 502 from the filter, never a request sent to it.
  const tls = await get(sbx, 'https', '/v1/models?key=q')
  assert.equal(tls.code, '502', tls.body)
  assert.match(tls.body, /certificate/)
  assert.equal((await seen()).length, before)

  // Nothing in the sandbox holds the value: its environment, files.
  const env = await sbx.commands.run('env; cat /proc/*/environ 2>/dev/null | tr "\\0" "\\n"')
  assert.ok(!env.stdout.includes(secretValue))
  assert.match(env.stdout, /SSL_CERT_FILE=\/\.cube\/egress-trust\/[0-9a-f]+\.pem/)
  // The bundle is the template's own trust store, the egress CA added.
  const own = await sbx.commands.run('f=/etc/ssl/certs/ca-certificates.crt; head -c "$(stat -c %s $f)" "$SSL_CERT_FILE" | cmp - $f && ' +
    'tail -n +$(($(wc -l < $f) + 1)) "$SSL_CERT_FILE" | openssl x509 -noout -subject')
  assert.match(own.stdout, /Cube egress CA/)
  // (Every file of a sandbox, and the memory of its processes, are
  // scanned by the Go daemon test; the default image is large.)
  const grep = await sbx.commands.run(`grep -rlF -e "${secretValue.slice(0, 16)}" /etc /home /root /tmp /var /run /.cube 2>/dev/null; echo done`, { user: 'root', timeoutMs: 120_000 })
  assert.equal(grep.stdout, 'done\n')

  // The audit trail, without the value or the query string.
  const logs = await eventually(async () => {
    const r = await api('GET', `/sandboxes/${sbx.sandboxId}/logs`)
    return /egress failed GET api\.rules\.test\/v1\/models/.test(r.text) && r
  }, { what: 'the egress lines in the sandbox log' })
  assert.match(logs.text, /egress denied GET api\.rules\.test\/v1\/models .*secrets are sent only over HTTPS/)
  assert.match(logs.text, /egress failed GET api\.rules\.test\/v1\/models .*rule api\.rules\.test set Authorization/)
  assert.ok(!logs.text.includes(secretValue) && !logs.text.includes('key=q'))

  // Live: the next request carries the new rule, which holds no secret
  // and so applies over plain HTTP.
  await sbx.updateNetwork({ rules: rules('Token replaced') })
  await get(sbx, 'http', '/after')
  assert.equal((await seen()).at(-1), 'api.rules.test Token replaced')
  await sbx.updateNetwork({})
  await get(sbx, 'http', '/without')
  assert.equal((await seen()).at(-1), 'api.rules.test Bearer from-the-sandbox')
})

test('a rule naming an unknown secret is refused with the field named', async () => {
  const err = await rejection(Sandbox.create({ network: { rules: rules(Secret.fill(`nope-${runTag}`)) } }))
  assert.match(err.message, /network\.rules\["api\.rules\.test"\]\[0\]\.transform\.headers\["Authorization"\]: secret "nope-/)
  const bad = await api('POST', '/sandboxes', { templateID: 'base', network: { rules: { '*': [{}] } } })
  assert.equal(bad.status, 400, bad.text)
  assert.match(bad.json.message, /network\.rules\["\*"\]/)
  const proxy = await api('POST', '/sandboxes', { templateID: 'base', network: { egressProxy: { address: 'proxy.example:1080' } } })
  assert.equal(proxy.status, 400, proxy.text)
  assert.match(proxy.json.message, /network\.egressProxy is not supported/)
})

test('a destroyed secret fails its rule instead of sending the request without it', async () => {
  const sbx = tracker.add(await Sandbox.create({ network: { rules: rules(`Bearer ${Secret.fill(secretName)}`) } }))
  const updated = await Secret.update(secretName, `${secretValue}-v2`)
  assert.equal(updated.version, 2)
  // While the secret exists, the request gets as far as the server's
  // certificate (which nobody trusts here).
  const live = await get(sbx, 'https', '/v2')
  assert.equal(live.code, '502', live.body)
  assert.match(live.body, /certificate/)
  assert.equal(await Secret.destroy(secretName), true)
  assert.equal(await Secret.exists(secretName), false)
  const count = (await seen()).length
  const gone = await get(sbx, 'https', '/gone')
  assert.equal(gone.code, '502', gone.body)
  assert.match(gone.body, /secret "vendor-key-/)
  assert.doesNotMatch(gone.body, /certificate/)
  assert.equal((await seen()).length, count)
})
