// The matrix's code interpreter, through the @e2b/code-interpreter release
// CUBE_E2E_SDK names (sdk.mjs): runCode's text, output and errors, a
// matplotlib chart, a DataFrame, Java's output, and the kernel's state
// across pause and connect.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, can, unless, pause } from './sdk.mjs'
import { Tracker, PNG_SIGNATURE } from '../tests/helpers.mjs'

// Every test needs runCode to send the sandbox's access token.
const noToken = unless(can.runCodeToken, 'access token in its runCode requests, which every Cube sandbox requires')

const tracker = new Tracker()
let sbx

before(async () => { sbx = tracker.add(await Sandbox.create()) })
after(() => tracker.killAll(Sandbox))

function ok(ex) {
  assert.equal(ex.error, undefined, ex.error && `${ex.error.name}: ${ex.error.value}\n${ex.error.traceback}`)
  return ex
}

test('runCode: a value\'s text, printed output, an error', { skip: noToken }, async () => {
  const ex = ok(await sbx.runCode('x = 40\nprint("hello")\nx + 2'))
  assert.equal(ex.text, '42')
  assert.deepEqual(ex.logs.stdout, ['hello\n'])
  const bad = await sbx.runCode('raise ValueError("bad value")')
  assert.equal(bad.error.name, 'ValueError')
  assert.equal(bad.error.value, 'bad value')
  assert.equal(ok(await sbx.runCode('x')).text, '40')
})

test('runCode: a matplotlib figure as a chart and a PNG', { skip: noToken }, async () => {
  const ex = ok(await sbx.runCode([
    'import matplotlib.pyplot as plt',
    'plt.bar(["a", "b", "c"], [3, 1, 2])',
    'plt.title("Counts")',
    'plt.show()',
  ].join('\n')))
  const r = ex.results.find((res) => res.png)
  assert.ok(r, `results: ${JSON.stringify(ex.results.map((res) => res.formats()))}`)
  assert.deepEqual(Buffer.from(r.png, 'base64').subarray(0, 8), PNG_SIGNATURE)
  assert.equal(r.chart?.type, 'bar', JSON.stringify(r.chart))
  assert.equal(r.chart.title, 'Counts')
  assert.deepEqual(r.chart.elements.map((e) => [e.label, e.value]), [['a', 3], ['b', 1], ['c', 2]])
})

test('runCode: a pandas DataFrame as HTML, text and data', { skip: noToken }, async () => {
  const ex = ok(await sbx.runCode('import pandas as pd\npd.DataFrame({"name": ["ada", "bob"], "score": [3, 5]})'))
  const r = ex.results[0]
  assert.match(r.html, /<table/)
  assert.match(r.text, /ada/)
  assert.deepEqual(r.data, { name: ['ada', 'bob'], score: [3, 5] })
})

// E2B's Java kernel sends each flush of System.out as it comes: println's
// text, then its line break (E2B's test_java_kernel reads stdout[0]).
test('runCode in Java: println arrives as its text, then the line break', { skip: noToken }, async () => {
  const ex = ok(await sbx.runCode('System.out.println("Hello, World!")', { language: 'java' }))
  assert.deepEqual(ex.logs.stdout, ['Hello, World!', '\n'])
  assert.equal(ok(await sbx.runCode('6 * 7', { language: 'java' })).text, '42')
})

test('runCode: the kernel\'s state survives pause and connect', { skip: unless(can.pause, 'pause') || noToken }, async () => {
  const paused = tracker.add(await Sandbox.create({ timeoutMs: 600_000 }))
  ok(await paused.runCode('kept = [1, 2, 3]'))
  await pause(paused)
  const resumed = await Sandbox.connect(paused.sandboxId)
  assert.equal(ok(await resumed.runCode('sum(kept)')).text, '6')
  await resumed.kill()
})
