// A private sandbox (network.allowPublicTraffic false): the SDK's commands
// and files reach envd with the sandbox's access token alone, as on E2B,
// while the sandbox's own ports want the traffic token.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'
import { Tracker, eventually, rawRequest, runTag } from './helpers.mjs'

const tracker = new Tracker()
let sbx

const PORT = 8000
const body = `private ${runTag}\n`

before(async () => {
  sbx = tracker.add(await Sandbox.create({ network: { allowPublicTraffic: false } }))
})
after(() => tracker.killAll(Sandbox))

test('commands and files work in a private sandbox', async () => {
  const run = await sbx.commands.run('echo private-ok')
  assert.equal(run.stdout, 'private-ok\n')
  await sbx.files.write('/home/user/site/hello.txt', body)
  assert.equal(await sbx.files.read('/home/user/site/hello.txt'), body)
})

test('a port of a private sandbox wants the traffic token', async () => {
  await sbx.commands.run(`python3 -m http.server ${PORT} --bind 0.0.0.0`, { background: true, cwd: '/home/user/site' })
  const route = { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': String(PORT) }
  await eventually(async () => {
    const r = await rawRequest('/hello.txt', { headers: { ...route, 'E2b-Traffic-Access-Token': sbx.trafficAccessToken } })
    return r.status === 200 && r.body.toString() === body
  }, { what: 'the web server in the private sandbox to answer with the traffic token', timeoutMs: 60_000 })
  const without = await rawRequest('/hello.txt', { headers: route })
  assert.equal(without.status, 403, without.body.toString())
})
