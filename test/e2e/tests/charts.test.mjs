// Structured results of the Python code interpreter through
// @e2b/code-interpreter: result.chart for matplotlib figures, result.data
// for pandas DataFrames, result.png for saved and shown images. The default
// template's kernels load cube_display (image/rootfs) for these.
import { describe, test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'
import { Tracker, PNG_SIGNATURE } from './helpers.mjs'

const tracker = new Tracker()
let sbx

before(async () => { sbx = tracker.add(await Sandbox.create()) })
after(() => tracker.killAll(Sandbox))

// run executes code and returns its results, failing on a Python error.
async function run(code) {
  const ex = await sbx.runCode(code)
  assert.equal(ex.error, undefined, ex.error && ex.error.traceback)
  return ex.results
}

// chartOf runs code that shows one figure and returns its chart, checking
// the PNG came along.
async function chartOf(code) {
  const results = await run(code)
  const withChart = results.filter((r) => r.chart)
  assert.equal(withChart.length, 1, `results: ${JSON.stringify(results.map((r) => r.formats()))}`)
  const r = withChart[0]
  assert.ok(r.png, 'the chart comes with its PNG')
  assert.deepEqual(Buffer.from(r.png, 'base64').subarray(0, 8), PNG_SIGNATURE)
  return r.chart
}

const isNumber = (v) => typeof v === 'number'
const isString = (v) => typeof v === 'string'

describe('charts', () => {
  test('two lines over dates, with title, labels and units', async () => {
    const chart = await chartOf(`
import datetime
import numpy as np
import matplotlib.pyplot as plt

days = [datetime.datetime(2024, 5, 1) + datetime.timedelta(hours=6 * i) for i in range(40)]
t = np.linspace(0, 4 * np.pi, 40)
plt.figure(figsize=(8, 4))
plt.plot(days, np.sin(t), label='sine')
plt.plot(days, np.cos(t), label='cosine')
plt.title('Waves over time')
plt.xlabel('Date (UTC)')
plt.ylabel('Amplitude (V)')
plt.legend()
plt.show()
`)
    assert.equal(chart.type, 'line')
    assert.equal(chart.title, 'Waves over time')
    assert.equal(chart.x_label, 'Date (UTC)')
    assert.equal(chart.y_label, 'Amplitude (V)')
    assert.equal(chart.x_unit, 'UTC')
    assert.equal(chart.y_unit, 'V')
    assert.equal(chart.x_scale, 'datetime')
    assert.equal(chart.y_scale, 'linear')
    assert.ok(chart.x_ticks.length > 0 && chart.x_ticks.every(isString))
    assert.ok(chart.x_ticks.every((t) => !Number.isNaN(new Date(t).getTime())), 'date ticks are ISO dates')
    assert.ok(chart.y_ticks.every(isNumber))
    assert.equal(chart.x_tick_labels.length, chart.x_ticks.length)
    assert.ok(chart.y_tick_labels.every(isString))

    assert.deepEqual(chart.elements.map((e) => e.label), ['sine', 'cosine'])
    for (const line of chart.elements) {
      assert.equal(line.points.length, 40)
      assert.ok(line.points.every(([x, y]) => isString(x) && isNumber(y)))
    }
    assert.equal(new Date(chart.elements[0].points[1][0]).toISOString(), '2024-05-01T06:00:00.000Z')
    assert.equal(chart.elements[1].points[0][1], 1)
  })

  test('a log scale', async () => {
    const chart = await chartOf(`
import numpy as np
import matplotlib.pyplot as plt
x = np.linspace(1, 20, 20)
plt.plot(x, np.exp(x), label='exp')
plt.yscale('log')
plt.ylabel('Value (log scale)')
plt.show()
`)
    assert.equal(chart.type, 'line')
    assert.equal(chart.x_scale, 'linear')
    assert.equal(chart.y_scale, 'log')
    assert.equal(chart.y_unit, 'log scale')
    assert.ok(chart.y_ticks.every(isNumber))
  })

  test('bars', async () => {
    const chart = await chartOf(`
import matplotlib.pyplot as plt
fruits = ['apples', 'pears', 'plums']
plt.bar(fruits, [12, 7, 3], label='crates')
plt.title('Harvest')
plt.xlabel('Fruit')
plt.ylabel('Crates')
plt.show()
`)
    assert.equal(chart.type, 'bar')
    assert.equal(chart.title, 'Harvest')
    assert.equal(chart.x_label, 'Fruit')
    assert.equal(chart.y_label, 'Crates')
    assert.equal(chart.x_unit, null)
    assert.equal(chart.y_unit, null)
    assert.deepEqual(chart.elements, [
      { label: 'apples', value: 12, group: 'crates' },
      { label: 'pears', value: 7, group: 'crates' },
      { label: 'plums', value: 3, group: 'crates' },
    ])
  })

  test('a scatter', async () => {
    const chart = await chartOf(`
import matplotlib.pyplot as plt
plt.scatter([1, 2, 3, 4], [4, 3, 2, 1], label='falling')
plt.scatter([1, 2], [1, 2], label='rising')
plt.xlabel('x')
plt.ylabel('y')
plt.show()
`)
    assert.equal(chart.type, 'scatter')
    assert.equal(chart.title, null)
    assert.equal(chart.x_label, 'x')
    assert.equal(chart.y_label, 'y')
    assert.ok(chart.x_ticks.every(isNumber) && chart.x_tick_labels.every(isString))
    assert.deepEqual(chart.elements.map((e) => e.label), ['falling', 'rising'])
    assert.deepEqual(chart.elements[0].points, [[1, 4], [2, 3], [3, 2], [4, 1]])
    assert.equal(chart.elements[1].points.length, 2)
  })

  test('a pie', async () => {
    const chart = await chartOf(`
import matplotlib.pyplot as plt
fig, ax = plt.subplots()
ax.pie([75, 25], labels=['yes', 'no'], autopct='%1.0f%%', startangle=90)
ax.axis('equal')
plt.title('Votes')
plt.show()
`)
    assert.equal(chart.type, 'pie')
    assert.equal(chart.title, 'Votes')
    assert.deepEqual(chart.elements, [
      { label: 'yes', angle: 270, radius: 1 },
      { label: 'no', angle: 90, radius: 1 },
    ])
  })

  test('a box plot', async () => {
    const chart = await chartOf(`
import matplotlib.pyplot as plt
fig, ax = plt.subplots()
ax.boxplot([[1, 2, 3, 4, 5], [2, 4, 4, 5, 6, 30]], labels=['small', 'spiky'], patch_artist=True)
ax.set_title('Spread')
ax.set_xlabel('Set')
ax.set_ylabel('Value')
plt.show()
`)
    assert.equal(chart.type, 'box_and_whisker')
    assert.equal(chart.title, 'Spread')
    assert.equal(chart.x_label, 'Set')
    assert.equal(chart.y_label, 'Value')
    assert.deepEqual(chart.elements, [
      { label: 'small', min: 1, first_quartile: 2, median: 3, third_quartile: 4, max: 5, outliers: [] },
      { label: 'spiky', min: 2, first_quartile: 4, median: 4.5, third_quartile: 5.75, max: 6, outliers: [30] },
    ])
  })

  test('two subplots make a superchart', async () => {
    const chart = await chartOf(`
import numpy as np
import matplotlib.pyplot as plt
fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
fig.suptitle('Side by side')
left.plot(np.arange(10), np.arange(10) ** 2)
left.set_title('Squares')
right.scatter([1, 2, 3], [3, 1, 2], label='dots')
right.set_title('Dots')
right.set_xlabel('X')
plt.show()
`)
    assert.equal(chart.type, 'superchart')
    assert.equal(chart.title, 'Side by side')
    assert.equal(chart.elements.length, 2)
    const [left, right] = chart.elements
    assert.equal(left.type, 'line')
    assert.equal(left.title, 'Squares')
    assert.equal(left.x_label, null)
    assert.equal(left.elements[0].points.length, 10)
    assert.equal(right.type, 'scatter')
    assert.equal(right.title, 'Dots')
    assert.equal(right.x_label, 'X')
    assert.equal(right.elements[0].points.length, 3)
  })

  test('shapes alone are an unknown chart', async () => {
    const chart = await chartOf(`
import matplotlib.pyplot as plt
fig, ax = plt.subplots()
ax.add_artist(plt.Circle((0, 0), 1, fill=False))
ax.set_xlim(-2, 2)
ax.set_ylim(-2, 2)
plt.title('A circle')
plt.show()
`)
    assert.equal(chart.type, 'unknown')
    assert.equal(chart.title, 'A circle')
    assert.deepEqual(chart.elements, [])
  })

  test('a figure as the last value carries its chart too', async () => {
    const results = await run(`
import matplotlib.pyplot as plt
fig, ax = plt.subplots()
ax.bar(['a', 'b'], [1, 2])
plt.close(fig)
fig
`)
    assert.equal(results.length, 1)
    assert.equal(results[0].isMainResult, true)
    assert.ok(results[0].png)
    assert.equal(results[0].chart.type, 'bar')
    assert.deepEqual(results[0].chart.elements.map((e) => e.value), [1, 2])
  })
})

describe('data', () => {
  test('a DataFrame as the last value comes with its columns', async () => {
    const results = await run(`
import pandas as pd
pd.DataFrame({
    'name': ['ada', 'bob', None],
    'score': [3.5, float('nan'), 5.0],
    'when': pd.to_datetime(['2024-01-02', '2024-02-03', None]),
})
`)
    assert.equal(results.length, 1)
    const r = results[0]
    assert.ok(r.html, 'the HTML table is still there')
    assert.deepEqual(r.data, {
      name: ['ada', 'bob', null],
      score: [3.5, null, 5],
      when: ['2024-01-02T00:00:00', '2024-02-03T00:00:00', null],
    })
  })

  test('other values carry neither data nor chart', async () => {
    const results = await run('{"a": [1, 2, 3]}')
    assert.equal(results.length, 1)
    assert.equal(results[0].data, undefined)
    assert.equal(results[0].chart, undefined)
  })
})

describe('images', () => {
  const pngOf = (r) => Buffer.from(r.png, 'base64')

  test('a saved figure comes back as a PNG', async () => {
    const results = await run(`
import matplotlib.pyplot as plt
fig, ax = plt.subplots()
ax.plot([1, 3, 2])
fig.savefig('/tmp/saved-figure.png')
plt.close(fig)
`)
    assert.equal(results.length, 1, `results: ${JSON.stringify(results.map((r) => r.formats()))}`)
    assert.deepEqual(pngOf(results[0]).subarray(0, 8), PNG_SIGNATURE)
    assert.ok(pngOf(results[0]).length > 1000, 'a real image, not a stub')
    const onDisk = await sbx.files.read('/tmp/saved-figure.png', { format: 'bytes' })
    assert.deepEqual(Buffer.from(onDisk).subarray(0, 8), PNG_SIGNATURE, 'the file is saved too')
  })

  test('a PIL image shown or saved comes back as a PNG', async () => {
    const shown = await run(`
from PIL import Image
image = Image.new('RGBA', (16, 16), 'teal')
image.show()
print('done')
`)
    assert.equal(shown.length, 1)
    assert.deepEqual(pngOf(shown[0]).subarray(0, 8), PNG_SIGNATURE)

    const saved = await run("image.save('/tmp/pil.png')")
    assert.equal(saved.length, 1)
    assert.deepEqual(pngOf(saved[0]).subarray(0, 8), PNG_SIGNATURE)
  })
})
