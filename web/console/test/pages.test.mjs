// Unit tests of what the Teams and Audit pages compute (npm test).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { quotasFrom, quotaSummary, maskedKey, gib, adminFromMasks, usageColumns } from '../src/pages/teams.js'
import { requestOf } from '../src/pages/audit.js'

test('a key is shown as its prefix and the ends of its value', () => {
  assert.equal(maskedKey({ prefix: 'e2b_', valueLength: 40, maskedValuePrefix: 'ab', maskedValueSuffix: '9f3c' }), 'e2b_ab…9f3c')
})

test('quotas from a form: empty is no limit, disk in GiB', () => {
  assert.deepEqual(quotasFrom({ runningSandboxes: '10', vcpus: '', memoryMB: '4096', maxTimeoutSeconds: ' 3600 ', diskGiB: '1.5', builds: '0', requestsPerSecond: '2.5' }), {
    runningSandboxes: 10, vcpus: 0, memoryMB: 4096, maxTimeoutSeconds: 3600, diskBytes: 1.5 * 2 ** 30, builds: 0, requestsPerSecond: 2.5,
  })
  assert.deepEqual(quotasFrom({}), { runningSandboxes: 0, vcpus: 0, memoryMB: 0, maxTimeoutSeconds: 0, diskBytes: 0, builds: 0, requestsPerSecond: 0 })
})

test('a disk quota left as shown keeps its bytes', () => {
  const previous = { diskBytes: 5e9 }
  assert.equal(gib(5e9), '4.657')
  assert.equal(quotasFrom({ diskGiB: gib(5e9) }, previous).diskBytes, 5e9)
  assert.equal(quotasFrom({ diskGiB: '5' }, previous).diskBytes, 5 * 2 ** 30)
  assert.equal(gib(0), '')
})

test('quotas from a form refuse negative, fractional counts and text', () => {
  assert.throws(() => quotasFrom({ vcpus: '-1' }), /vCPUs: give a whole number of 0 or more/)
  assert.throws(() => quotasFrom({ runningSandboxes: '1.5' }), /Running sandboxes/)
  assert.throws(() => quotasFrom({ requestsPerSecond: 'fast' }), /Requests per second/)
  assert.equal(quotasFrom({ requestsPerSecond: '0.5' }).requestsPerSecond, 0.5)
})

test('a quota summary names only the limits set', () => {
  assert.equal(quotaSummary({}), 'no limits')
  assert.equal(quotaSummary({ runningSandboxes: 0, vcpus: 0 }), 'no limits')
  assert.equal(quotaSummary({ runningSandboxes: 5, memoryMB: 2048, maxTimeoutSeconds: 3600, diskBytes: 2 ** 30, builds: 1, requestsPerSecond: 10 }),
    '5 running · 2.0 GiB memory · timeout 1 h · 1.0 GiB disk · 1 build at once · 10 requests/s per key')
  assert.equal(quotaSummary({ maxTimeoutSeconds: 90 }), 'timeout 90 s')
  assert.equal(quotaSummary({ maxTimeoutSeconds: 300 }), 'timeout 5 min')
})

test('an audit entry\'s request: the route, which names its method', () => {
  assert.equal(requestOf({ method: 'POST', route: 'POST /sandboxes' }), 'POST /sandboxes')
  assert.equal(requestOf({ method: 'DELETE', route: '/teams/{teamID}' }), 'DELETE /teams/{teamID}')
})

test('the signed-in key is told apart by its mask', () => {
  const key = 'e2b_ab' + '0'.repeat(34) + '9f3c'
  const admin = { admin: true, mask: { prefix: 'e2b_', valueLength: 40, maskedValuePrefix: 'ab', maskedValueSuffix: '9f3c' } }
  const other = { admin: false, mask: { prefix: 'e2b_', valueLength: 40, maskedValuePrefix: 'cd', maskedValueSuffix: '9f3c' } }
  assert.equal(adminFromMasks([admin, other], key), true)
  assert.equal(adminFromMasks([{ ...admin, admin: false }, other], key), false)
  assert.equal(adminFromMasks([other], key), undefined, 'no key fits')
  assert.equal(adminFromMasks([admin, { ...admin, admin: false }], key), undefined, 'two keys fit')
  assert.equal(adminFromMasks([admin], key + '0'), undefined, 'a longer key does not fit')
  assert.equal(adminFromMasks(undefined, key), undefined)
})

test('a team\'s usage charts from its series', () => {
  assert.deepEqual(usageColumns([
    { timestamp: '2026-07-14T13:05:00Z', timestampUnix: 1784034300, concurrentSandboxes: 2, sandboxStartRate: 0.2 },
    { timestamp: '2026-07-14T13:05:05Z', timestampUnix: 1784034305, concurrentSandboxes: 3, sandboxStartRate: 0 },
  ]), { times: [1784034300, 1784034305], running: [2, 3], startsPerMinute: [12, 0] })
  assert.deepEqual(usageColumns(null), { times: [], running: [], startsPerMinute: [] })
})
