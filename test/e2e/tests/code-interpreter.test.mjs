// Stateful Python through @e2b/code-interpreter: results, streams, errors,
// rich outputs, contexts and environment variables.
import { describe, test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'
import { Tracker, PNG_SIGNATURE } from './helpers.mjs'

const stripAnsi = (s) => s.replace(/\x1b\[[0-9;]*m/g, '')

// A string result's text is its repr without the quotes, as E2B answers.

const tracker = new Tracker()
let sbx

before(async () => { sbx = tracker.add(await Sandbox.create({ envs: { SBX_CI_VAR: 'sandbox-wide' } })) })
after(() => tracker.killAll(Sandbox))

describe('runCode', () => {
  test('an expression gives a text result', async () => {
    const ex = await sbx.runCode('1+1')
    assert.equal(ex.error, undefined)
    assert.equal(ex.text, '2')
    assert.equal(ex.results.length, 1)
    assert.equal(ex.results[0].isMainResult, true)
    assert.ok(ex.executionCount > 0)
  })

  test('print goes to logs.stdout, sys.stderr to logs.stderr', async () => {
    const out = []
    const ex = await sbx.runCode('import sys\nprint("hello")\nprint("oops", file=sys.stderr)\nprint("again")', {
      onStdout: (m) => out.push(m.line),
    })
    assert.equal(ex.error, undefined)
    assert.equal(ex.logs.stdout.join(''), 'hello\nagain\n')
    assert.equal(ex.logs.stderr.join(''), 'oops\n')
    assert.equal(out.join(''), 'hello\nagain\n')
    assert.deepEqual(ex.results, [])
  })

  test('an exception gives its name, value and traceback', async () => {
    const ex = await sbx.runCode('def f():\n    raise ValueError("bad value 42")\nf()')
    assert.ok(ex.error, 'execution has an error')
    assert.equal(ex.error.name, 'ValueError')
    assert.equal(ex.error.value, 'bad value 42')
    // The traceback is IPython's, colours and all; read it without them.
    const traceback = stripAnsi(ex.error.traceback)
    assert.match(traceback, /ValueError: bad value 42/)
    assert.match(traceback, /raise ValueError/)
    // The kernel survives the exception.
    const next = await sbx.runCode('"still alive"')
    assert.equal(next.text, 'still alive')
  })

  test('state persists across calls', async () => {
    await sbx.runCode('counter = 10\ndef bump(n):\n    global counter\n    counter += n\n    return counter')
    await sbx.runCode('bump(5)')
    const ex = await sbx.runCode('bump(1)')
    assert.equal(ex.text, '16')
  })

  test('a matplotlib figure comes back as a PNG', async () => {
    const ex = await sbx.runCode([
      'import matplotlib.pyplot as plt',
      'fig, ax = plt.subplots()',
      'ax.plot([1, 2, 3], [4, 1, 9])',
      'plt.show()',
    ].join('\n'))
    assert.equal(ex.error, undefined, ex.error && ex.error.traceback)
    const withPng = ex.results.filter((r) => r.png)
    assert.equal(withPng.length, 1, `results: ${JSON.stringify(ex.results.map((r) => r.formats()))}`)
    const png = Buffer.from(withPng[0].png, 'base64')
    assert.deepEqual(png.subarray(0, 8), PNG_SIGNATURE)
    assert.ok(png.length > 1000, 'a real image, not a stub')
  })

  test('a pandas DataFrame comes back as HTML and text', async () => {
    const ex = await sbx.runCode('import pandas as pd\npd.DataFrame({"name": ["ada", "bob"], "score": [3, 5]})')
    assert.equal(ex.error, undefined, ex.error && ex.error.traceback)
    const r = ex.results[0]
    assert.ok(r.html, 'the result has HTML')
    assert.match(r.html, /<table/)
    assert.match(r.html, /ada/)
    assert.match(r.text, /score/)
  })

  test('env vars: sandbox-wide and per call, the latter for that call only', async () => {
    const ex = await sbx.runCode('import os\nos.environ.get("SBX_CI_VAR")')
    assert.equal(ex.text, 'sandbox-wide')
    const ex2 = await sbx.runCode('import os\nos.environ.get("CALL_VAR")', { envs: { CALL_VAR: 'only-now' } })
    assert.equal(ex2.text, 'only-now')
    const ex3 = await sbx.runCode('import os\nos.environ.get("CALL_VAR")')
    assert.equal(ex3.text, undefined, `CALL_VAR leaked into a later call: ${JSON.stringify(ex3.results)}`)
  })
})

describe('contexts', () => {
  test('a new context has its own state and cwd', async () => {
    await sbx.runCode('shared_name = "default context"')
    const ctx = await sbx.createCodeContext({ cwd: '/tmp' })
    assert.ok(ctx.id)
    assert.equal(ctx.cwd, '/tmp')
    const missing = await sbx.runCode('shared_name', { context: ctx })
    assert.ok(missing.error, 'the new context must not see the default one')
    assert.equal(missing.error.name, 'NameError')
    await sbx.runCode('shared_name = "second context"', { context: ctx })
    assert.equal((await sbx.runCode('shared_name', { context: ctx })).text, 'second context')
    assert.equal((await sbx.runCode('shared_name')).text, 'default context')
    assert.equal((await sbx.runCode('import os\nos.getcwd()', { context: ctx })).text, '/tmp')

    const listed = await sbx.listCodeContexts()
    assert.ok(listed.some((c) => c.id === ctx.id), 'the context is listed')

    await sbx.restartCodeContext(ctx)
    const afterRestart = await sbx.runCode('shared_name', { context: ctx })
    assert.equal(afterRestart.error && afterRestart.error.name, 'NameError', 'restart clears the state')

    await sbx.removeCodeContext(ctx)
    const after = await sbx.listCodeContexts()
    assert.ok(!after.some((c) => c.id === ctx.id), 'a removed context is gone')
  })

  test('language picks a fresh context of that language', async () => {
    const ex = await sbx.runCode('import sys\nsys.version_info[0]', { language: 'python' })
    assert.equal(ex.text, '3')
  })
})
