// The matrix's sandbox lifecycle: create, getInfo, connect, list and kill,
// through the release CUBE_E2E_SDK names (sdk.mjs).
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, listSandboxes } from './sdk.mjs'
import { Tracker, runTag } from '../tests/helpers.mjs'

const tracker = new Tracker()
after(() => tracker.killAll(Sandbox))

test('create with metadata and envs, getInfo', async () => {
  const metadata = { matrix: runTag, kind: 'create' }
  const sbx = tracker.add(await Sandbox.create({ metadata, envs: { MATRIX_VAR: 'from create' }, timeoutMs: 120_000 }))
  assert.match(sbx.sandboxId, /^[a-z0-9]+$/)
  const info = await sbx.getInfo()
  assert.equal(info.sandboxId, sbx.sandboxId)
  assert.ok(info.templateId)
  assert.deepEqual(info.metadata, metadata)
  assert.ok(info.endAt > info.startedAt)
  const r = await sbx.commands.run('echo "$MATRIX_VAR"; whoami')
  assert.equal(r.stdout, 'from create\nuser\n')
  await sbx.kill()
})

test('connect from a second handle', async () => {
  const sbx = tracker.add(await Sandbox.create())
  await sbx.commands.run("printf 'first handle' > /tmp/marker")
  const other = await Sandbox.connect(sbx.sandboxId)
  assert.equal(other.sandboxId, sbx.sandboxId)
  assert.equal((await other.commands.run('cat /tmp/marker')).stdout, 'first handle')
  await other.kill()
})

test('list by metadata', async () => {
  const suite = `list-${runTag}`
  const made = await Promise.all([0, 1].map((i) =>
    Sandbox.create({ metadata: { suite, idx: String(i), odd: 'a&b=c d' } }).then((s) => tracker.add(s))))
  const listed = await listSandboxes({ query: { metadata: { suite } } })
  assert.deepEqual(listed.map((s) => s.sandboxId).sort(), made.map((s) => s.sandboxId).sort())
  for (const s of listed) assert.equal(s.metadata.odd, 'a&b=c d')
  const one = await listSandboxes({ query: { metadata: { suite, idx: '1' } } })
  assert.deepEqual(one.map((s) => s.sandboxId), [made[1].sandboxId])
  await Promise.all(made.map((s) => s.kill()))
})

test('kill: the sandbox is gone, a second kill reports it', async () => {
  const sbx = tracker.add(await Sandbox.create())
  assert.equal(await Sandbox.kill(sbx.sandboxId), true)
  assert.equal(await Sandbox.kill(sbx.sandboxId), false)
  assert.equal(await sbx.isRunning(), false)
  const listed = await listSandboxes()
  assert.ok(!listed.some((s) => s.sandboxId === sbx.sandboxId), 'a killed sandbox is not listed')
})
