// Teams: two teams, each with its own key, share one Cube. Through the
// official SDK with each team's key, nothing one team makes is visible or
// touchable by the other (404, never 403), lists are disjoint, and a
// revoked key stops working at once.
import { describe, test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, Volume } from 'e2b'
import { api, apiUrl, eventually, mode, rejection, runTag } from './helpers.mjs'

if (mode === 'header') process.env.E2B_VOLUME_API_URL = apiUrl

const teams = []
const cleanup = []
after(async () => {
  for (const fn of cleanup.reverse()) await fn().catch(() => {})
  for (const t of teams) await api('DELETE', `/teams/${t.teamID}`)
})

/** A team made by the admin key, with one key of its own. */
async function newTeam(suffix) {
  const made = await api('POST', '/teams', { name: `t-${runTag}-${suffix}` })
  assert.equal(made.status, 201, made.text)
  teams.push(made.json)
  const key = await api('POST', `/admin/teams/${made.json.teamID}/api-keys`, { name: `k-${suffix}` })
  assert.equal(key.status, 201, key.text)
  assert.match(key.json.key, /^e2b_[0-9a-f]{40}$/)
  return { id: made.json.teamID, key: key.json.key, keyID: key.json.id }
}

describe('two teams on one Cube', () => {
  let a, b, sbx, vol, snap
  before(async () => {
    a = await newTeam('a')
    b = await newTeam('b')
    // Team A makes a sandbox (from the default template, which is public),
    // a volume and a snapshot.
    sbx = await Sandbox.create({ apiKey: a.key, metadata: { teams: runTag } })
    cleanup.push(() => Sandbox.kill(sbx.sandboxId, { apiKey: a.key }))
    vol = await Volume.create(`vol-${runTag}`, { apiKey: a.key })
    cleanup.push(() => Volume.destroy(vol.volumeId, { apiKey: a.key }))
    snap = await sbx.createSnapshot()
    cleanup.push(() => Sandbox.deleteSnapshot(snap.snapshotId, { apiKey: a.key }))
  })

  test('the sandbox is the owning team\'s alone', async () => {
    const info = await Sandbox.getInfo(sbx.sandboxId, { apiKey: a.key })
    assert.equal(info.sandboxId, sbx.sandboxId)
    const err = await rejection(Sandbox.getInfo(sbx.sandboxId, { apiKey: b.key }))
    assert.match(err.message, /doesn't exist|not found/i)
    assert.equal(await Sandbox.kill(sbx.sandboxId, { apiKey: b.key }), false, 'team B cannot kill it')
    await rejection(Sandbox.connect(sbx.sandboxId, { apiKey: b.key }))
    await rejection(Sandbox.setTimeout(sbx.sandboxId, 60_000, { apiKey: b.key }))
    const raw = await api('POST', `/sandboxes/${sbx.sandboxId}/pause`, undefined, { key: b.key })
    assert.equal(raw.status, 404, raw.text)
    // Still running for its owner.
    assert.equal(await sbx.isRunning(), true)
    assert.equal((await sbx.commands.run('echo ok')).stdout.trim(), 'ok')
  })

  test('lists are disjoint', async () => {
    const mine = await Sandbox.list({ apiKey: a.key, query: { metadata: { teams: runTag } } }).nextItems()
    assert.deepEqual(mine.map((s) => s.sandboxId), [sbx.sandboxId])
    const theirs = await Sandbox.list({ apiKey: b.key }).nextItems()
    assert.ok(!theirs.some((s) => s.sandboxId === sbx.sandboxId), 'team B lists none of team A\'s sandboxes')
    const snapsB = await Sandbox.listSnapshots({ apiKey: b.key }).nextItems()
    assert.ok(!snapsB.some((s) => s.snapshotId === snap.snapshotId), 'nor its snapshots')
    const snapsA = await Sandbox.listSnapshots({ apiKey: a.key, sandboxId: sbx.sandboxId }).nextItems()
    assert.deepEqual(snapsA.map((s) => s.snapshotId), [snap.snapshotId])
    const volsB = await Volume.list({ apiKey: b.key })
    assert.ok(!volsB.some((v) => v.volumeId === vol.volumeId), 'nor its volumes')
  })

  test('snapshots and volumes are invisible and untouchable', async () => {
    await rejection(Sandbox.create(snap.snapshotId, { apiKey: b.key }))
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId, { apiKey: b.key }), false)
    const tpl = await api('GET', `/templates/${snap.snapshotId}`, undefined, { key: b.key })
    assert.equal(tpl.status, 404, tpl.text)
    await rejection(Volume.getInfo(vol.volumeId, { apiKey: b.key }))
    const del = await api('DELETE', `/volumes/${vol.volumeId}`, undefined, { key: b.key })
    assert.equal(del.status, 404, del.text)
    // Names are per team: team B may use the same volume name.
    const same = await Volume.create(`vol-${runTag}`, { apiKey: b.key })
    cleanup.push(() => Volume.destroy(same.volumeId, { apiKey: b.key }))
    assert.notEqual(same.volumeId, vol.volumeId)
    // And team A's own still answer it.
    assert.equal((await Volume.getInfo(vol.volumeId, { apiKey: a.key })).name, `vol-${runTag}`)
  })

  test('keys: listed masked, and a revoked key fails at once', async () => {
    const listed = await api('GET', '/api-keys', undefined, { key: a.key })
    assert.equal(listed.status, 200, listed.text)
    const k = listed.json.find((x) => x.id === a.keyID)
    assert.ok(k, 'team A lists its key')
    assert.equal(k.mask.prefix, 'e2b_')
    assert.ok(a.key.endsWith(k.mask.maskedValueSuffix))
    assert.ok(!listed.text.includes(a.key), 'the key itself is never listed')
    const other = await api('GET', '/api-keys', undefined, { key: b.key })
    assert.ok(!other.json.some((x) => x.id === a.keyID), 'team B does not list it')
    assert.equal((await api('DELETE', `/api-keys/${a.keyID}`, undefined, { key: b.key })).status, 404)

    const spare = await api('POST', '/api-keys', { name: 'spare' }, { key: a.key })
    assert.equal(spare.status, 201, spare.text)
    const gone = await api('DELETE', `/api-keys/${spare.json.id}`, undefined, { key: a.key })
    assert.equal(gone.status, 204, gone.text)
    const after = await api('GET', '/v2/sandboxes', undefined, { key: spare.json.key })
    assert.equal(after.status, 401, after.text)
  })

  test('team keys cannot reach the admin routes', async () => {
    for (const [method, path] of [['GET', '/nodes'], ['POST', '/teams'], ['GET', '/admin/sandboxes/running-counts']]) {
      const res = await api(method, path, method === 'POST' ? { name: 'x' } : undefined, { key: a.key })
      assert.equal(res.status, 403, `${method} ${path}: ${res.text}`)
    }
    const counts = await api('GET', '/admin/sandboxes/running-counts')
    assert.equal(counts.status, 200, counts.text)
    assert.ok(counts.json[a.id] >= 1, `team A's running sandbox is counted: ${counts.text}`)
  })

  test('quotas: a 429 naming the quota at the limit, and work again below it', async () => {
    const set = await api('PUT', `/teams/${b.id}/quotas`, { runningSandboxes: 1, maxTimeoutSeconds: 600 })
    assert.equal(set.status, 200, set.text)
    const first = await Sandbox.create({ apiKey: b.key, timeoutMs: 300_000 })
    cleanup.push(() => Sandbox.kill(first.sandboxId, { apiKey: b.key }))
    const over = await api('POST', '/sandboxes', { templateID: 'base' }, { key: b.key })
    assert.equal(over.status, 429, over.text)
    assert.match(over.json.message, /runningSandboxes.*1 in use/)
    // Another team is not held back.
    const other = await Sandbox.create({ apiKey: a.key })
    await other.kill()
    const long = await api('POST', '/sandboxes', { templateID: 'base', timeout: 3600 }, { key: b.key })
    assert.equal(long.status, 429, long.text)
    assert.match(long.json.message, /maxTimeout/)
    await first.kill()
    const again = await Sandbox.create({ apiKey: b.key, timeoutMs: 300_000 })
    await again.kill()
    assert.equal((await api('PUT', `/teams/${b.id}/quotas`, {})).status, 200)
  })

  test('secrets: names per team, another team\'s is not found', async () => {
    const name = `tok-${runTag}`
    const made = await api('POST', '/secrets', { name, value: 'a-value' }, { key: a.key })
    assert.equal(made.status, 201, made.text)
    cleanup.push(() => api('DELETE', `/secrets/${made.json.secretID}`, undefined, { key: a.key }))
    for (const ref of [name, made.json.secretID]) {
      const got = await api('GET', `/secrets/${ref}`, undefined, { key: b.key })
      assert.equal(got.status, 404, got.text)
    }
    const same = await api('POST', '/secrets', { name, value: 'b-value' }, { key: b.key })
    assert.equal(same.status, 201, same.text)
    cleanup.push(() => api('DELETE', `/secrets/${same.json.secretID}`, undefined, { key: b.key }))
    const listed = await api('GET', '/secrets', undefined, { key: b.key })
    assert.deepEqual(listed.json.map((x) => x.secretID), [same.json.secretID])
  })

  test('usage: a sandbox\'s running time, within a second', async () => {
    // The quota test's sandboxes ended over a second before start.
    await new Promise((r) => setTimeout(r, 1100))
    const start = Math.floor(Date.now() / 1000)
    const sbxB = await Sandbox.create({ apiKey: b.key })
    const born = Date.now()
    await new Promise((r) => setTimeout(r, 2000))
    await sbxB.kill()
    const lived = (Date.now() - born) / 1000
    const res = await api('GET', `/teams/${b.id}/usage?start=${start}`, undefined, { key: b.key })
    assert.equal(res.status, 200, res.text)
    assert.ok(res.json.sandboxSeconds >= lived - 1, `usage ${res.json.sandboxSeconds} s < lived ${lived} s`)
    assert.ok(res.json.sandboxSeconds <= lived + 1, `usage ${res.json.sandboxSeconds} s > lived ${lived} s`)
    assert.equal(res.json.runningSandboxes, 0)
    const theirs = await api('GET', `/teams/${a.id}/usage`, undefined, { key: b.key })
    assert.equal(theirs.status, 404, theirs.text)
  })

  test('audit: each change once, with the key that made it', async () => {
    const spare = await Sandbox.create({ apiKey: a.key })
    await Sandbox.kill(spare.sandboxId, { apiKey: b.key }) // refused: not team B's
    await Sandbox.kill(spare.sandboxId, { apiKey: a.key })
    let mine
    await eventually(async () => {
      const res = await api('GET', `/audit?target=${spare.sandboxId}`, undefined, { key: a.key })
      mine = res.json
      return res.status === 200 && mine.some((e) => e.route === 'DELETE /sandboxes/{sandboxID}')
    }, { what: () => `team A's kill in its audit trail: ${JSON.stringify(mine)}` })
    const kills = mine.filter((e) => e.route === 'DELETE /sandboxes/{sandboxID}')
    assert.equal(kills.length, 1, JSON.stringify(mine))
    assert.equal(kills[0].status, 204)
    assert.equal(kills[0].keyName, 'k-a')
    assert.equal(kills[0].teamID, a.id)
    const theirs = await api('GET', `/audit?target=${spare.sandboxId}`, undefined, { key: b.key })
    assert.deepEqual(theirs.json.map((e) => [e.teamID, e.status]), [[b.id, 404]], 'team B\'s refused kill is in its own trail')
    assert.ok(!JSON.stringify(theirs.json).includes(a.key) && !JSON.stringify(mine).includes(a.key), 'no key in the trail')
  })
})

