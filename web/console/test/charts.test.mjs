// Unit tests of the console's pure functions (npm test): no browser, no
// server. The pages import only in a DOM, so what is tested here is what
// they compute.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { timeWindow, timeLabels, MIN_SPAN_S, windowQuantile } from '../src/charts.js'

const t0 = Date.UTC(2026, 6, 14, 13, 5, 7) / 1000 // 14 July 2026, 13:05:07 UTC
const utc = { locale: 'en-GB', timeZone: 'UTC' }
const year = /\b(19|20)\d\d\b|\/\d\d\b/

test('one sample sits in the middle of a window of MIN_SPAN_S', () => {
  assert.equal(MIN_SPAN_S, 120)
  assert.deepEqual(timeWindow([t0]), [t0 - 60, t0 + 60])
})

test('samples at one instant get the same window', () => {
  assert.deepEqual(timeWindow([t0, t0, t0]), [t0 - 60, t0 + 60])
})

test('samples spanning less than the window are centred in it', () => {
  assert.deepEqual(timeWindow([t0, t0 + 2, t0 + 4]), [t0 + 2 - 60, t0 + 2 + 60])
})

test('samples spanning the window or more set the axis themselves', () => {
  assert.deepEqual(timeWindow([t0, t0 + 120]), [t0, t0 + 120])
  assert.deepEqual(timeWindow([t0, t0 + 30, t0 + 3600]), [t0, t0 + 3600])
})

test('no samples, no window', () => {
  assert.deepEqual(timeWindow([]), [null, null])
})

test('a window of another width', () => {
  assert.deepEqual(timeWindow([t0], 10), [t0 - 5, t0 + 5])
})

test('ticks less than a minute apart are labelled with the time of day to the second', () => {
  assert.deepEqual(timeLabels([t0 - 7, t0 + 23, t0 + 53], 30, utc), ['13:05:00', '13:05:30', '13:06:00'])
})

test('ticks minutes or hours apart are labelled with the time of day', () => {
  assert.deepEqual(timeLabels([t0 - 7, t0 + 53], 60, utc), ['13:05', '13:06'])
  assert.deepEqual(timeLabels([t0 - 307, t0 + 3293], 3600, utc), ['13:00', '14:00'])
})

test('ticks days apart are labelled with the day, not the year', () => {
  assert.deepEqual(timeLabels([t0, t0 + 86400], 86400, utc), ['14 Jul', '15 Jul'])
})

test('the axis of a single sample shows no year, in any locale', () => {
  const [min, max] = timeWindow([t0])
  const splits = []
  for (let t = Math.ceil(min / 30) * 30; t <= max; t += 30) splits.push(t)
  assert.ok(splits.length >= 4)
  for (const locale of ['en-US', 'en-GB', 'de-DE', 'ja-JP', undefined]) {
    for (const label of timeLabels(splits, 30, { locale })) {
      assert.doesNotMatch(label, year, `${locale}: ${label}`)
      assert.match(label, /\d{1,2}\D\d\d\D\d\d/, `${locale}: ${label} is a time of day`)
    }
  }
})

test('a missing tick is an empty label', () => {
  assert.deepEqual(timeLabels([null], 60, utc), [''])
})

test('windowQuantile interpolates within the bucket between two polls', () => {
  const prev = { bounds: [0.1, 1, 10], buckets: [0, 0, 0], count: 0 }
  const cur = { bounds: [0.1, 1, 10], buckets: [0, 10, 10], count: 10 }
  assert.equal(windowQuantile(prev, cur, 0.5), 0.1 + 0.9 * 0.5)
  assert.equal(windowQuantile(cur, cur, 0.5), null)
})
