// The matrix's pause and connect, snapshots and forks, through the release
// CUBE_E2E_SDK names (sdk.mjs): a file and a running process are carried
// across each, where the release has the operation.
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, can, unless, pause, listSandboxes } from './sdk.mjs'
import { Tracker, runTag } from '../tests/helpers.mjs'

const tracker = new Tracker()
after(() => tracker.killAll(Sandbox))

async function seed(sbx, value) {
  await sbx.files.write('/home/user/state.txt', value)
}

async function state(sbx) {
  return await sbx.files.read('/home/user/state.txt')
}

test('pause, then connect resumes it with files and processes', { skip: unless(can.pause, 'pause') }, async () => {
  const sbx = tracker.add(await Sandbox.create({ timeoutMs: 600_000, metadata: { matrix: runTag, kind: 'pause' } }))
  await seed(sbx, 'paused')
  const bg = await sbx.commands.run('sleep 3600', { background: true })
  await pause(sbx)
  const listed = await listSandboxes({ query: { metadata: { matrix: runTag, kind: 'pause' } } })
  assert.deepEqual(listed.map((s) => [s.sandboxId, s.state]), [[sbx.sandboxId, 'paused']])

  const resumed = await Sandbox.connect(sbx.sandboxId)
  assert.equal(resumed.sandboxId, sbx.sandboxId)
  assert.equal(await state(resumed), 'paused')
  assert.ok((await resumed.commands.list()).some((p) => p.pid === bg.pid), 'the background process survived the pause')
  assert.equal(await resumed.isRunning(), true)
  await resumed.kill()
})

test('createSnapshot, create from it, delete it', { skip: unless(can.snapshots, 'snapshots') }, async () => {
  const src = tracker.add(await Sandbox.create())
  await seed(src, 'snapshotted')
  const snap = await src.createSnapshot()
  assert.ok(snap.snapshotId)
  await seed(src, 'source moved on')

  const child = tracker.add(await Sandbox.create(snap.snapshotId))
  assert.notEqual(child.sandboxId, src.sandboxId)
  assert.equal(await state(child), 'snapshotted')
  assert.equal(await state(src), 'source moved on')
  const listed = await Sandbox.listSnapshots({ sandboxId: src.sandboxId }).nextItems()
  assert.ok(listed.some((s) => s.snapshotId === snap.snapshotId), JSON.stringify(listed))
  assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true)
  await Promise.all([src.kill(), child.kill()])
})

test('fork: the child starts from the parent\'s state', { skip: unless(can.fork, 'fork') }, async () => {
  const parent = tracker.add(await Sandbox.create())
  await seed(parent, 'forked')
  const forks = await parent.fork({ count: 1 })
  assert.equal(forks.length, 1)
  assert.ok(!(forks[0] instanceof Error), String(forks[0]))
  const child = tracker.add(forks[0])
  assert.notEqual(child.sandboxId, parent.sandboxId)
  assert.equal(await state(child), 'forked')
  await seed(child, 'child')
  assert.equal(await state(parent), 'forked')
  await Promise.all([parent.kill(), child.kill()])
})
