// Sandbox lifecycle through the e2b SDK: create, info, list, timeouts,
// expiry, kill, connect, and the errors a user sees.
import { describe, test, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, Template, AuthenticationError, SandboxError, SandboxNotFoundError } from 'e2b'
import { Tracker, api, eventually, rejection, runTag, wrongKey } from './helpers.mjs'

const tracker = new Tracker()
after(() => tracker.killAll(Sandbox))

// Slack for comparing the server's clock with ours (same machine).
const CLOCK_SLACK_MS = 2_000

describe('create', () => {
  test('the default template, by alias and by id all give the same template', async () => {
    const tpl = await api('GET', '/templates/base')
    assert.equal(tpl.status, 200, tpl.text)
    const templateId = tpl.json.templateID
    assert.ok(templateId, 'GET /templates/base names the template id')

    const byDefault = tracker.add(await Sandbox.create())
    const byAlias = tracker.add(await Sandbox.create('code-interpreter-v1'))
    const byId = tracker.add(await Sandbox.create(templateId))
    const ids = new Set()
    for (const sbx of [byDefault, byAlias, byId]) {
      assert.match(sbx.sandboxId, /^[a-z0-9]+$/)
      ids.add(sbx.sandboxId)
      const info = await sbx.getInfo()
      assert.equal(info.templateId, templateId)
      assert.equal(info.state, 'running')
      const r = await sbx.commands.run('echo ready')
      assert.equal(r.stdout, 'ready\n')
    }
    assert.equal(ids.size, 3, 'every sandbox has its own id')
    await Promise.all([byDefault.kill(), byAlias.kill(), byId.kill()])
  })

  test('getInfo reports the id, template, times, metadata and state', async () => {
    const metadata = { owner: 'e2e', run: runTag, 'with space': 'a b&c=d/é' }
    const timeoutMs = 120_000
    const before = Date.now()
    const sbx = tracker.add(await Sandbox.create({ metadata, timeoutMs }))
    const afterCreate = Date.now()
    const info = await sbx.getInfo()
    assert.equal(info.sandboxId, sbx.sandboxId)
    assert.ok(info.templateId)
    assert.deepEqual(info.metadata, metadata)
    assert.equal(info.state, 'running')
    assert.ok(info.startedAt instanceof Date && !isNaN(info.startedAt))
    assert.ok(info.startedAt.getTime() >= before - CLOCK_SLACK_MS, `startedAt ${info.startedAt.toISOString()} is before the request`)
    assert.ok(info.startedAt.getTime() <= afterCreate + CLOCK_SLACK_MS, `startedAt ${info.startedAt.toISOString()} is after the answer`)
    // endAt is startedAt-ish + timeout: set while the create request ran.
    assert.ok(info.endAt.getTime() >= before + timeoutMs - CLOCK_SLACK_MS, `endAt ${info.endAt.toISOString()}`)
    assert.ok(info.endAt.getTime() <= afterCreate + timeoutMs + CLOCK_SLACK_MS, `endAt ${info.endAt.toISOString()}`)
    assert.ok(info.cpuCount > 0)
    assert.ok(info.memoryMB > 0)
    assert.match(info.envdVersion, /^\d+\.\d+\.\d+/)

    // The static form answers the same.
    const again = await Sandbox.getInfo(sbx.sandboxId)
    assert.equal(again.sandboxId, sbx.sandboxId)
    assert.deepEqual(again.metadata, metadata)
    await sbx.kill()
  })
})

describe('list', () => {
  test('filters by metadata and pages with limit', async () => {
    const suite = `list-${runTag}`
    const made = await Promise.all([0, 1, 2].map((i) =>
      Sandbox.create({ metadata: { suite, idx: String(i), odd: 'a&b=c d' } }).then((s) => tracker.add(s))))
    const madeIds = made.map((s) => s.sandboxId).sort()

    // One sandbox outside the filter must never show up.
    const other = tracker.add(await Sandbox.create({ metadata: { suite: `other-${runTag}` } }))

    const paginator = Sandbox.list({ query: { metadata: { suite } }, limit: 2 })
    assert.equal(paginator.hasNext, true)
    const first = await paginator.nextItems()
    assert.equal(first.length, 2, 'the first page holds limit items')
    assert.equal(paginator.hasNext, true, 'a third sandbox is left for the next page')
    const second = await paginator.nextItems()
    assert.equal(second.length, 1)
    assert.equal(paginator.hasNext, false)
    const listed = [...first, ...second]
    assert.deepEqual(listed.map((s) => s.sandboxId).sort(), madeIds)
    for (const s of listed) {
      assert.equal(s.metadata.suite, suite)
      assert.equal(s.metadata.odd, 'a&b=c d')
      assert.equal(s.state, 'running')
      assert.ok(s.templateId)
      assert.ok(s.startedAt instanceof Date && !isNaN(s.startedAt))
      assert.ok(s.endAt > s.startedAt)
    }

    // Two keys are combined with AND; values with & and = survive encoding.
    const one = await Sandbox.list({ query: { metadata: { suite, idx: '1', odd: 'a&b=c d' } } }).nextItems()
    assert.deepEqual(one.map((s) => s.sandboxId), [made[1].sandboxId])

    const none = await Sandbox.list({ query: { metadata: { suite, idx: 'no-such' } } }).nextItems()
    assert.deepEqual(none, [])

    // A killed sandbox leaves the list.
    await made[0].kill()
    const rest = await Sandbox.list({ query: { metadata: { suite } } }).nextItems()
    assert.deepEqual(rest.map((s) => s.sandboxId).sort(), madeIds.filter((id) => id !== made[0].sandboxId))

    await Promise.all([made[1].kill(), made[2].kill(), other.kill()])
  })

  test('state filter: running sandboxes only', async () => {
    const suite = `state-${runTag}`
    const sbx = tracker.add(await Sandbox.create({ metadata: { suite } }))
    const running = await Sandbox.list({ query: { metadata: { suite }, state: ['running'] } }).nextItems()
    assert.deepEqual(running.map((s) => s.sandboxId), [sbx.sandboxId])
    const paused = await Sandbox.list({ query: { metadata: { suite }, state: ['paused'] } }).nextItems()
    assert.deepEqual(paused, [])
    await sbx.kill()
  })
})

describe('timeouts', () => {
  test('setTimeout moves the end time both ways', async () => {
    const sbx = tracker.add(await Sandbox.create({ timeoutMs: 60_000 }))
    for (const timeoutMs of [600_000, 90_000]) {
      const before = Date.now()
      await sbx.setTimeout(timeoutMs)
      const afterCall = Date.now()
      const { endAt } = await sbx.getInfo()
      assert.ok(endAt.getTime() >= before + timeoutMs - CLOCK_SLACK_MS, `endAt ${endAt.toISOString()} after setTimeout(${timeoutMs})`)
      assert.ok(endAt.getTime() <= afterCall + timeoutMs + CLOCK_SLACK_MS, `endAt ${endAt.toISOString()} after setTimeout(${timeoutMs})`)
    }
    // The static form works too.
    await Sandbox.setTimeout(sbx.sandboxId, 120_000)
    assert.equal((await sbx.getInfo()).state, 'running')
    await sbx.kill()
  })

  test('a sandbox is gone once its timeout passes', async () => {
    const sbx = tracker.add(await Sandbox.create({ timeoutMs: 3_000 }))
    const id = sbx.sandboxId
    await eventually(async () => !(await sbx.isRunning()), { what: `sandbox ${id} to expire`, timeoutMs: 120_000 })
    const err = await rejection(Sandbox.getInfo(id))
    assert.ok(err instanceof SandboxNotFoundError, `getInfo after expiry: ${err}`)
    const listed = await Sandbox.list({ query: { state: ['running', 'paused'] } }).nextItems()
    assert.ok(!listed.some((s) => s.sandboxId === id), 'an expired sandbox is not listed')
    assert.equal(await Sandbox.kill(id), false)
  })
})

describe('kill and connect', () => {
  test('kill twice: the second reports the sandbox is already gone', async () => {
    const sbx = tracker.add(await Sandbox.create())
    assert.equal(await Sandbox.kill(sbx.sandboxId), true)
    assert.equal(await Sandbox.kill(sbx.sandboxId), false)
    assert.equal(await sbx.isRunning(), false)
    const err = await rejection(sbx.getInfo())
    assert.ok(err instanceof SandboxNotFoundError, String(err))
    // The instance method does not throw on an already killed sandbox.
    await sbx.kill()
  })

  test('connect to an existing sandbox sees its state', async () => {
    const sbx = tracker.add(await Sandbox.create())
    await sbx.commands.run("printf 'from the first handle' > /tmp/connect-marker")
    const other = await Sandbox.connect(sbx.sandboxId)
    assert.equal(other.sandboxId, sbx.sandboxId)
    const r = await other.commands.run('cat /tmp/connect-marker')
    assert.equal(r.stdout, 'from the first handle')
    await other.kill()
    assert.equal(await sbx.isRunning(), false)
  })

  test('connect never shortens the timeout', async () => {
    const sbx = tracker.add(await Sandbox.create({ timeoutMs: 600_000 }))
    const { endAt } = await sbx.getInfo()
    await Sandbox.connect(sbx.sandboxId, { timeoutMs: 30_000 })
    const after = await sbx.getInfo()
    assert.ok(after.endAt.getTime() >= endAt.getTime(), `endAt went from ${endAt.toISOString()} to ${after.endAt.toISOString()}`)
    await sbx.kill()
  })

  test('connect to an unknown sandbox fails with not found', async () => {
    const err = await rejection(Sandbox.connect('nosuchsandbox0000'))
    assert.ok(err instanceof SandboxNotFoundError, String(err))
  })

  test('Template.exists knows the default template by alias and not an unknown name', async () => {
    assert.equal(await Template.exists('base'), true)
    assert.equal(await Template.exists('code-interpreter-v1'), true)
    assert.equal(await Template.exists(`no-such-template-${runTag}`), false)
  })

  test('an unknown sandbox is a 404 in E2B\'s words, and killing it answers false', async () => {
    const id = `nosuch${runTag}`
    const res = await api('GET', `/sandboxes/${id}`)
    assert.equal(res.status, 404, res.text)
    assert.deepEqual(res.json, { code: 404, message: `Sandbox "${id}" doesn't exist or you don't have access to it` })
    assert.equal(await Sandbox.kill(id), false)
  })
})

describe('errors', () => {
  test('a wrong API key gives AuthenticationError', async () => {
    const err = await rejection(Sandbox.create({ apiKey: wrongKey }))
    assert.ok(err instanceof AuthenticationError, `create: ${err}`)
    const err2 = await rejection(Sandbox.list({ apiKey: wrongKey }).nextItems())
    assert.ok(err2 instanceof AuthenticationError, `list: ${err2}`)
  })

  test('an unknown template is a 404 that names it', async () => {
    const name = `no-such-template-${runTag}`
    const err = await rejection(Sandbox.create(name))
    assert.ok(err instanceof SandboxError, String(err))
    assert.equal(err.statusCode, 404, String(err))
    assert.ok(err.message.includes(name), `message names the template: ${err.message}`)
  })
})
