// Snapshots, create-from-snapshot, pause and resume, fork, clone and
// rollback: Python state and files carried across each operation.
import { describe, test, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'
import { Tracker, api, eventually, rejection, runTag } from './helpers.mjs'

const tracker = new Tracker()
after(() => tracker.killAll(Sandbox))

// Python state and a file, written so each copy can be told apart. The
// file goes through a command rather than the files API, so these tests
// judge snapshots, not uploads (files.test.mjs covers those).
async function seed(sbx, value) {
  const ex = await sbx.runCode(`marker = ${JSON.stringify(value)}\nhistory = [marker]`)
  assert.equal(ex.error, undefined)
  await sbx.commands.run(`printf %s '${value}' > /home/user/state.txt`)
}

async function state(sbx) {
  const ex = await sbx.runCode('(marker, len(history))')
  assert.equal(ex.error, undefined, ex.error && `${ex.error.name}: ${ex.error.value}`)
  return { python: ex.text, file: (await sbx.commands.run('cat /home/user/state.txt')).stdout }
}

const expect = (value, n = 1) => ({ python: `(${pyRepr(value)}, ${n})`, file: value })
const pyRepr = (s) => `'${s}'`

describe('snapshots', () => {
  test('createSnapshot, create from it, list and delete', async () => {
    const src = tracker.add(await Sandbox.create())
    await seed(src, 'before-snapshot')
    const snap = await src.createSnapshot()
    assert.ok(snap.snapshotId, 'a snapshot id')

    // The source keeps running with the same state, and moves on.
    assert.deepEqual(await state(src), expect('before-snapshot'))
    await seed(src, 'source-after')

    const child = tracker.add(await Sandbox.create(snap.snapshotId))
    assert.notEqual(child.sandboxId, src.sandboxId)
    assert.deepEqual(await state(child), expect('before-snapshot'), 'the child has the snapshot state')
    assert.deepEqual(await state(src), expect('source-after'), 'the source is unchanged by the child')
    // The child is a full sandbox: commands and the kernel work on.
    await child.runCode('history.append("child")')
    assert.equal((await child.runCode('len(history)')).text, '2')
    assert.equal((await child.commands.run('whoami')).stdout, 'user\n')

    const listed = await Sandbox.listSnapshots({ sandboxId: src.sandboxId }).nextItems()
    assert.ok(listed.some((s) => s.snapshotId === snap.snapshotId), `listed: ${JSON.stringify(listed)}`)

    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true)
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), false)
    const gone = await Sandbox.listSnapshots({ sandboxId: src.sandboxId }).nextItems()
    assert.ok(!gone.some((s) => s.snapshotId === snap.snapshotId))
    const err = await rejection(Sandbox.create(snap.snapshotId))
    assert.equal(err.statusCode, 404, String(err))

    // A sandbox made from a deleted snapshot keeps working.
    assert.equal((await child.runCode('len(history)')).text, '2')
    await Promise.all([src.kill(), child.kill()])
  })

  test('a named snapshot can be created from by name', async () => {
    const src = tracker.add(await Sandbox.create())
    await seed(src, 'named')
    const name = `e2e-snap-${runTag}`
    const snap = await src.createSnapshot({ name })
    assert.ok(snap.names.some((n) => n.includes(name)), `names: ${JSON.stringify(snap.names)}`)
    const byName = await Sandbox.listSnapshots({ name }).nextItems()
    assert.deepEqual(byName.map((s) => s.snapshotId), [snap.snapshotId])
    const child = tracker.add(await Sandbox.create(name))
    assert.deepEqual(await state(child), expect('named'))
    await Promise.all([src.kill(), child.kill()])
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true)
  })
})

// The number of warm sandboxes the server keeps for a template or snapshot
// (its Prometheus gauge, labelled by template for a caller with a key).
async function warmFor(id) {
  const { text } = await api('GET', '/metrics')
  const line = text.split('\n').find((l) => l.startsWith(`cube_warm_pool_sandboxes{template="${id}"}`))
  return line ? Number(line.split(' ').pop()) : 0
}

// Lines a counting process appended since it started.
const ticks = async (sbx) => Number((await sbx.commands.run('wc -l < /home/user/ticks')).stdout)

describe('a snapshot in demand', () => {
  test('serves its sandboxes from a pool of its own, each at the snapshot state, held while it waited', async () => {
    const src = tracker.add(await Sandbox.create())
    await seed(src, 'stream')
    // A process that counts ten times a second while it runs.
    await src.commands.run('while :; do echo >> /home/user/ticks; sleep 0.1; done', { background: true })
    await eventually(async () => (await ticks(src)) >= 3, { what: 'the counter to tick' })
    const snap = await src.createSnapshot()

    // Two creates within a minute put the snapshot in demand.
    const first = tracker.add(await Sandbox.create(snap.snapshotId))
    const base = await ticks(first)
    assert.deepEqual(await state(first), expect('stream'))
    const second = tracker.add(await Sandbox.create(snap.snapshotId))
    await Promise.all([first.kill(), second.kill()])
    await eventually(async () => (await warmFor(snap.snapshotId)) >= 1, { what: 'a warm sandbox of the snapshot' })

    // Three seconds in the pool: a sandbox that ran on would count 30 more.
    await new Promise((r) => setTimeout(r, 3000))
    const warm = tracker.add(await Sandbox.create(snap.snapshotId))
    const got = await ticks(warm)
    assert.ok(got - base < 15, `${got} ticks in the sandbox from the pool, ${base} in one restored on demand`)
    assert.deepEqual(await state(warm), expect('stream'))
    // Its processes run again once it is handed out.
    await eventually(async () => (await ticks(warm)) >= got + 5, { what: 'the counter to run on in the handed-out sandbox' })

    // Deleting the snapshot empties its pool.
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true)
    assert.equal(await warmFor(snap.snapshotId), 0)
    await Promise.all([src.kill(), warm.kill()])
  })
})

describe('pause and resume', () => {
  test('pause, then connect resumes with memory, files and processes intact', async () => {
    const sbx = tracker.add(await Sandbox.create({ timeoutMs: 600_000 }))
    await seed(sbx, 'paused-state')
    const bg = await sbx.commands.run('sleep 3600', { background: true })

    assert.equal(await sbx.pause(), true)
    const info = await Sandbox.getInfo(sbx.sandboxId)
    assert.equal(info.state, 'paused')
    assert.equal(await Sandbox.pause(sbx.sandboxId), false, 'pausing a paused sandbox reports false')
    const paused = await Sandbox.list({ query: { state: ['paused'] } }).nextItems()
    assert.ok(paused.some((s) => s.sandboxId === sbx.sandboxId), 'listed as paused')

    const resumed = await Sandbox.connect(sbx.sandboxId)
    assert.equal(resumed.sandboxId, sbx.sandboxId)
    assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'running')
    assert.deepEqual(await state(resumed), expect('paused-state'))
    const procs = await resumed.commands.list()
    assert.ok(procs.some((p) => p.pid === bg.pid), 'the background process survived the pause')
    await resumed.kill()
  })
})

describe('fork, clone and rollback', () => {
  test('fork over HTTP: children start from the parent state and diverge', async () => {
    const parent = tracker.add(await Sandbox.create({ timeoutMs: 600_000 }))
    await seed(parent, 'parent')
    const { endAt } = await parent.getInfo()

    const res = await api('POST', `/sandboxes/${parent.sandboxId}/fork`, { count: 2, timeout: 300 })
    assert.equal(res.status, 201, res.text)
    assert.equal(res.json.length, 2)
    const children = []
    for (const entry of res.json) {
      assert.equal(entry.error, undefined, JSON.stringify(entry.error))
      assert.match(entry.sandbox.sandboxID, /^[a-z0-9]+$/)
      tracker.ids.add(entry.sandbox.sandboxID)
      children.push(await Sandbox.connect(entry.sandbox.sandboxID))
    }
    assert.equal(new Set([parent.sandboxId, ...children.map((c) => c.sandboxId)]).size, 3)

    for (const [i, c] of children.entries()) {
      assert.deepEqual(await state(c), expect('parent'))
      await seed(c, `child-${i}`)
    }
    await seed(parent, 'parent-later')
    assert.deepEqual(await state(children[0]), expect('child-0'))
    assert.deepEqual(await state(children[1]), expect('child-1'))
    assert.deepEqual(await state(parent), expect('parent-later'))

    const pinfo = await parent.getInfo()
    assert.equal(pinfo.state, 'running')
    assert.equal(pinfo.endAt.getTime(), endAt.getTime(), 'the parent keeps its end time')
    await Promise.all([parent.kill(), ...children.map((c) => c.kill())])
  })

  test('fork through the SDK', async () => {
    const parent = tracker.add(await Sandbox.create())
    await seed(parent, 'sdk-fork')
    const forks = await parent.fork({ count: 1 })
    assert.equal(forks.length, 1)
    assert.ok(!(forks[0] instanceof Error), String(forks[0]))
    tracker.add(forks[0])
    assert.deepEqual(await state(forks[0]), expect('sdk-fork'))
    await Promise.all([parent.kill(), forks[0].kill()])
  })

  test('clone over HTTP', async () => {
    const parent = tracker.add(await Sandbox.create())
    await seed(parent, 'cloned')
    const res = await api('POST', `/sandboxes/${parent.sandboxId}/clone`, { count: 2, concurrency: 2 })
    assert.equal(res.status, 201, res.text)
    assert.equal(res.json.length, 2)
    for (const entry of res.json) {
      assert.equal(entry.error, undefined, JSON.stringify(entry.error))
      tracker.ids.add(entry.sandbox.sandboxID)
      const c = await Sandbox.connect(entry.sandbox.sandboxID)
      assert.deepEqual(await state(c), expect('cloned'))
      await c.kill()
    }
    await parent.kill()
  })

  test('fork of an unknown sandbox is a 404', async () => {
    const res = await api('POST', `/sandboxes/nosuch${runTag}/fork`, { count: 1 })
    assert.equal(res.status, 404, res.text)
    assert.equal(res.json.code, 404)
  })

  test('rollback returns memory and files to the snapshot, in place', async () => {
    const sbx = tracker.add(await Sandbox.create())
    await seed(sbx, 'checkpointed')
    const snap = await sbx.createSnapshot()
    await seed(sbx, 'later')
    await sbx.runCode('history.append("more")')
    const { endAt, metadata } = await sbx.getInfo()

    const res = await api('POST', `/sandboxes/${sbx.sandboxId}/rollback`, { snapshotID: snap.snapshotId })
    assert.equal(res.status, 200, res.text)
    assert.equal(res.json.sandboxID, sbx.sandboxId)
    assert.equal(res.json.snapshotID, snap.snapshotId)

    // The same handle (id, token, address) reaches the rolled-back sandbox.
    assert.deepEqual(await state(sbx), expect('checkpointed'))
    const info = await sbx.getInfo()
    assert.equal(info.endAt.getTime(), endAt.getTime())
    assert.deepEqual(info.metadata, metadata)

    // Only a snapshot the sandbox took itself.
    const other = tracker.add(await Sandbox.create())
    const res2 = await api('POST', `/sandboxes/${other.sandboxId}/rollback`, { snapshotID: snap.snapshotId })
    assert.equal(res2.status, 403, res2.text)
    await Promise.all([sbx.kill(), other.kill()])
    await Sandbox.deleteSnapshot(snap.snapshotId)
  })
})
