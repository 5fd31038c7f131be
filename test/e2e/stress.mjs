// A burst of mixed sandbox operations against one cube-server: create,
// create from a snapshot, pause, resume (connect), fork and kill, picked at
// random among those the sandboxes at hand allow, a few at a time. Every
// sandbox a create, fork or resume hands back must answer `echo ok` and
// runCode('1+1') at once. scripts/stress.sh runs it through scripts/e2e.sh
// (CUBE_E2E_SCRIPT), which starts the server and sets the SDK's environment.
//
//   node stress.mjs [operations=200] [concurrency=4]
//
// It prints a line per operation, then `N passed, M failed` and each
// failure (operation, sandbox, step, error), and exits 1 if any failed.
import { Sandbox } from '@e2b/code-interpreter'
import { mode } from './tests/helpers.mjs'

const total = Number(process.argv[2] ?? 200)
const concurrency = Number(process.argv[3] ?? 4)
const maxLive = 8 // sandboxes in existence at once, running or paused
const maxSnapshots = 4 // then creates from a snapshot reuse one
const timeoutMs = 3_600_000 // no sandbox expires during the burst

// Idle sandboxes: an operation takes what it works on out of these, so no
// two operations ever hold the same sandbox, and puts back what is left.
const running = [] // Sandbox handles
const paused = [] // sandbox ids
const snapshots = [] // snapshot ids
let live = 0 // sandboxes that exist or are being made, idle or not

const results = []
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
const take = (list) => list.splice(Math.floor(Math.random() * list.length), 1)[0]
const oneOf = (list) => list[Math.floor(Math.random() * list.length)]

// pick chooses the next operation and takes its sandboxes, or returns
// undefined when none is possible until another operation ends.
function pick() {
  const ops = []
  const add = (op, weight) => ops.push(...Array(weight).fill(op))
  if (live < maxLive) {
    add('create', 2)
    if (snapshots.length || running.length) add('create-from-snapshot', 2)
    if (running.length) add('fork', 2)
  }
  if (running.length) add('pause', 2)
  if (paused.length) add('resume', 3)
  if (running.length || paused.length) add('kill', live >= maxLive ? 3 : 1)
  const op = oneOf(ops)
  // An operation that makes a sandbox reserves its place in live first.
  switch (op) {
    case 'create':
      live++
      return { op, reserved: true }
    case 'create-from-snapshot': {
      live++
      const reuse = snapshots.length && (snapshots.length >= maxSnapshots || !running.length || Math.random() < 0.5)
      return { op, reserved: true, ...(reuse ? { snapshotId: oneOf(snapshots) } : { source: take(running) }) }
    }
    case 'fork':
      live++
      return { op, reserved: true, parent: take(running) }
    case 'pause':
      return { op, sbx: take(running) }
    case 'resume':
      return { op, id: take(paused) }
    case 'kill': {
      const fromRunning = running.length && (!paused.length || Math.random() < 0.5)
      return { op, id: fromRunning ? take(running).sandboxId : take(paused) }
    }
  }
  return undefined
}

// answers checks that a sandbox handed back runs commands and code.
async function answers(r, sbx, who = '') {
  r.id = sbx.sandboxId
  r.step = `${who}echo ok`
  const cmd = await sbx.commands.run('echo ok')
  if (cmd.stdout !== 'ok\n') throw new Error(`printed ${JSON.stringify(cmd.stdout)}`)
  r.step = `${who}runCode('1+1')`
  const ex = await sbx.runCode('1+1')
  if (ex.error) throw new Error(`${ex.error.name}: ${ex.error.value}`)
  if (ex.text !== '2') throw new Error(`gave ${JSON.stringify(ex.text)}`)
}

// run performs one operation. job.held lists the sandboxes it holds; on
// success it puts them back, on failure they are killed and forgotten.
async function run(r, job) {
  const held = (job.held = [])
  const made = (sbx) => {
    held.push(sbx)
    job.reserved = false
  }
  switch (job.op) {
    case 'create': {
      r.step = 'Sandbox.create'
      const sbx = await Sandbox.create({ timeoutMs })
      made(sbx)
      await answers(r, sbx)
      break
    }
    case 'create-from-snapshot': {
      let snapshotId = job.snapshotId
      if (!snapshotId) {
        held.push(job.source)
        r.id = r.from = job.source.sandboxId
        r.step = 'createSnapshot'
        snapshotId = (await job.source.createSnapshot()).snapshotId
        snapshots.push(snapshotId)
      }
      r.snapshotId = snapshotId
      r.step = 'Sandbox.create(snapshot)'
      const sbx = await Sandbox.create(snapshotId, { timeoutMs })
      made(sbx)
      await answers(r, sbx)
      break
    }
    case 'fork': {
      held.push(job.parent)
      r.id = r.from = job.parent.sandboxId
      r.step = 'fork'
      const [child] = await job.parent.fork({ count: 1, timeoutMs })
      if (child instanceof Error) throw child
      made(child)
      await answers(r, child)
      // The parent was checkpointed in place: it must answer too.
      await answers(r, job.parent, 'the parent\'s ')
      r.id = child.sandboxId
      break
    }
    case 'pause': {
      held.push(job.sbx)
      r.id = job.sbx.sandboxId
      r.step = 'pause'
      const ok = await job.sbx.pause()
      if (ok !== true) throw new Error(`pause returned ${ok}`)
      held.pop()
      paused.push(r.id)
      return
    }
    case 'resume': {
      r.id = job.id
      held.push({ sandboxId: job.id })
      r.step = 'Sandbox.connect'
      const sbx = await Sandbox.connect(job.id, { timeoutMs })
      held[0] = sbx
      await answers(r, sbx)
      break
    }
    case 'kill': {
      r.id = job.id
      r.step = 'Sandbox.kill'
      live-- // whatever the answer, the sandbox is forgotten
      const ok = await Sandbox.kill(job.id)
      if (ok !== true) throw new Error(`kill returned ${ok}`)
      return
    }
  }
  running.push(...held)
}

// After a failure, the sandboxes the operation held (in an unknown state)
// are killed and a place it reserved but did not fill is given back.
function giveUp(job) {
  live -= job.held.length + (job.reserved ? 1 : 0)
  for (const sbx of job.held) Sandbox.kill(sbx.sandboxId).catch(() => {})
}

// The sandbox an operation ended on, and what it came from.
function where(r) {
  const from = [r.from && r.from !== r.id && `from ${r.from}`, r.snapshotId && `snapshot ${r.snapshotId}`].filter(Boolean)
  return from.length ? `${r.id} (${from.join(', ')})` : r.id
}

function describe(err) {
  let s = `${err?.name ?? 'Error'}: ${err?.message ?? err}`
  for (let c = err?.cause; c; c = c.cause) s += ` (cause: ${c.code ?? c.name}: ${c.message})`
  return s
}

let started = 0
async function worker() {
  while (started < total) {
    const job = pick()
    if (!job) {
      await sleep(100)
      continue
    }
    const r = { n: ++started, op: job.op, id: '-', step: '' }
    const t0 = Date.now()
    try {
      await run(r, job)
      r.ok = true
    } catch (err) {
      r.error = describe(err)
      giveUp(job)
    }
    results.push(r)
    const secs = ((Date.now() - t0) / 1000).toFixed(1)
    const at = new Date().toISOString().slice(11, 23)
    const what = `${at} #${r.n} ${r.op} ${where(r)} ${secs}s`
    console.log(r.ok ? `${what} ok` : `${what} FAILED at ${r.step}: ${r.error}`)
  }
}

console.log(`stress: ${total} operations, ${concurrency} at a time, at most ${maxLive} sandboxes (${mode})`)
const t0 = Date.now()
await Promise.all(Array.from({ length: concurrency }, worker))
const secs = Math.round((Date.now() - t0) / 1000)

// Tidy up; none of this counts.
await Promise.all([...running.map((s) => s.sandboxId), ...paused].map((id) => Sandbox.kill(id).catch(() => {})))
await Promise.all(snapshots.map((id) => Sandbox.deleteSnapshot(id).catch(() => {})))

const byOp = {}
for (const r of results) {
  const t = (byOp[r.op] ??= { ok: 0, all: 0 })
  t.all++
  if (r.ok) t.ok++
}
console.log(`stress: ${secs}s; ` + Object.entries(byOp).map(([op, t]) => `${op} ${t.ok}/${t.all}`).join(', '))
const failed = results.filter((r) => !r.ok)
console.log(`${results.length - failed.length} passed, ${failed.length} failed`)
for (const r of failed) {
  console.log(`  #${r.n} ${r.op} sandbox ${where(r)}, at ${r.step}: ${r.error}`)
}
process.exit(failed.length ? 1 : 0)
