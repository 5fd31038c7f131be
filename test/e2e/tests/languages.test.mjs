// The code interpreter's languages beyond Python, through
// @e2b/code-interpreter: bash, javascript, typescript, r and java, each on a
// real Jupyter kernel of the default template (Cube's wrapper kernels in
// cube_kernels for bash, javascript, typescript and java, the last on the
// JDK's JShell; Debian's IRkernel for r).
// Each language gets its output streams, a result, state across calls, an
// error, sandbox-wide and per-call environment variables, the working
// directory, and a context of its own.
import { describe, test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'
import { Tracker } from './helpers.mjs'

const stripAnsi = (s) => s.replace(/\x1b\[[0-9;]*m/g, '')

const tracker = new Tracker()
let sbx

before(async () => { sbx = tracker.add(await Sandbox.create({ envs: { SBX_LANG_VAR: 'sandbox-wide' } })) })
after(() => tracker.killAll(Sandbox))

// run executes code in the default context of a language and fails the
// test on an unexpected error, showing it.
async function run(language, code, opts = {}) {
  const ex = await sbx.runCode(code, { language, ...opts })
  if (!opts.expectError) {
    assert.equal(ex.error, undefined, ex.error && `${ex.error.name}: ${ex.error.value}\n${stripAnsi(ex.error.traceback)}`)
  }
  return ex
}

test('a new sandbox lists default python and javascript contexts', async () => {
  const fresh = tracker.add(await Sandbox.create())
  const languages = (await fresh.listCodeContexts()).map((c) => c.language)
  assert.ok(languages.includes('python') && languages.includes('javascript'), JSON.stringify(languages))
  const ex = await fresh.runCode('1 + 1', { language: 'js' })
  assert.equal(ex.text, '2')
  await fresh.kill()
})

test('a bash line arrives with its newline, as one chunk', async () => {
  const ex = await run('bash', 'echo one-line')
  assert.deepEqual(ex.logs.stdout, ['one-line\n'])
})

// contextTest creates a context of the language, checks it is listed with
// that language, runs code in it, and removes it.
async function contextTest(language, code, want) {
  const ctx = await sbx.createCodeContext({ language })
  assert.ok(ctx.id)
  assert.equal(ctx.language, language)
  const listed = await sbx.listCodeContexts()
  const mine = listed.find((c) => c.id === ctx.id)
  assert.ok(mine, 'the context is listed')
  assert.equal(mine.language, language)
  const ex = await sbx.runCode(code, { context: ctx })
  assert.equal(ex.error, undefined, ex.error && ex.error.value)
  assert.equal(ex.logs.stdout.join('') + (ex.text ?? ''), want)
  await sbx.removeCodeContext(ctx)
}

describe('bash', () => {
  test('the working directory is /home/user', async () => {
    const ex = await run('bash', 'pwd')
    assert.equal(ex.logs.stdout.join(''), '/home/user\n')
  })

  test('stdout and stderr are streamed; a command has no result value', async () => {
    const out = []
    const ex = await run('bash', 'echo hello\necho oops >&2\nprintf "a\\nb\\n"', { onStdout: (m) => out.push(m.line) })
    assert.equal(ex.logs.stdout.join(''), 'hello\na\nb\n')
    assert.equal(ex.logs.stderr.join(''), 'oops\n')
    assert.equal(out.join(''), 'hello\na\nb\n')
    assert.equal(ex.text, undefined)
    assert.deepEqual(ex.results, [])
  })

  test('variables, functions and the directory persist across calls', async () => {
    await run('bash', 'COUNT=41\ngreet() { echo "hi $1"; }\nmkdir -p /tmp/bash-state && cd /tmp/bash-state')
    const ex = await run('bash', 'echo $((COUNT + 1))\ngreet there\npwd')
    assert.equal(ex.logs.stdout.join(''), '42\nhi there\n/tmp/bash-state\n')
    await run('bash', 'cd /home/user')
  })

  test('a failing last command is an error with its exit status', async () => {
    const ex = await run('bash', 'echo before\nls /no/such/dir', { expectError: true })
    assert.ok(ex.error, 'execution has an error')
    assert.equal(ex.error.name, 'Error')
    assert.equal(ex.error.value, '2')
    assert.equal(ex.logs.stdout.join(''), 'before\n')
    assert.match(ex.logs.stderr.join(''), /No such file or directory/)
    const ex2 = await run('bash', 'false', { expectError: true })
    assert.equal(ex2.error && ex2.error.value, '1')
    // The shell, and its state, survive.
    assert.equal((await run('bash', 'echo $COUNT')).logs.stdout.join(''), '41\n')
  })

  test('a shell that exits is replaced by a fresh one', async () => {
    const ex = await run('bash', 'exit 3', { expectError: true })
    assert.ok(ex.error, 'exit is reported')
    assert.equal(ex.error.value, '3')
    assert.equal((await run('bash', 'echo back')).logs.stdout.join(''), 'back\n')
  })

  test('an interrupted command ends the call; the shell and its state survive', async () => {
    await run('bash', 'KEEP=kept')
    await assert.rejects(sbx.runCode('sleep 30\necho not reached', { language: 'bash', timeoutMs: 2000 }))
    const ex = await run('bash', 'echo "$KEEP"')
    assert.equal(ex.logs.stdout.join(''), 'kept\n')
  })

  test('env vars: sandbox-wide and per call, the latter for that call only', async () => {
    assert.equal((await run('bash', 'echo "$SBX_LANG_VAR"')).logs.stdout.join(''), 'sandbox-wide\n')
    const ex = await run('bash', 'echo "$CALL_VAR"', { envs: { CALL_VAR: "only now, it's quoted" } })
    assert.equal(ex.logs.stdout.join(''), "only now, it's quoted\n")
    assert.equal((await run('bash', 'echo "${CALL_VAR-unset}"')).logs.stdout.join(''), 'unset\n')
  })

  test('the template has python, node, npm and tsc on PATH', async () => {
    const ex = await run('bash', 'python --version\nnode --version\nnpm --version\ntsc --version')
    const [python, node, npm, tsc] = ex.logs.stdout.join('').trim().split('\n')
    assert.match(python, /^Python 3\./)
    assert.match(node, /^v\d+\./)
    assert.match(npm, /^\d+\.\d+\.\d+$/)
    assert.match(tsc, /^Version 5\./)
  })

  test('a bash context is created and listed', async () => {
    await contextTest('bash', 'echo "in a context $SBX_LANG_VAR"', 'in a context sandbox-wide\n')
  })
})

describe('javascript', () => {
  test('console.log and console.error are streamed, the last expression is the result', async () => {
    const out = []
    const ex = await run('js', 'console.log("hello")\nconsole.error("oops")\n1 + 1', { onStdout: (m) => out.push(m.line) })
    assert.equal(ex.logs.stdout.join(''), 'hello\n')
    assert.equal(ex.logs.stderr.join(''), 'oops\n')
    assert.equal(out.join(''), 'hello\n')
    assert.equal(ex.text, '2')
    assert.equal(ex.results.length, 1)
    assert.equal(ex.results[0].isMainResult, true)
    assert.equal((await run('javascript', '"a string"')).text, 'a string')
    assert.equal((await run('js', '({ a: 1, b: [1, 2] })')).text, '{ a: 1, b: [ 1, 2 ] }')
    assert.equal((await run('js', 'let unused = 1')).text, undefined)
  })

  test('declarations persist across calls and may be declared again', async () => {
    await run('js', 'let counter = 40\nconst add = (n) => { counter += n; return counter }\nfunction twice(x) { return 2 * x }\nclass Box { constructor(v) { this.v = v } }')
    assert.equal((await run('js', 'add(1)\nadd(1)')).text, '42')
    assert.equal((await run('js', 'twice(new Box(21).v)')).text, '42')
    assert.equal((await run('js', 'let counter = 7; counter')).text, '7')
  })

  test('top-level await', async () => {
    const ex = await run('js', 'const v = await new Promise((r) => setTimeout(() => r(6), 20))\nv * 7')
    assert.equal(ex.text, '42')
  })

  test('ESM imports of node built-ins, and require', async () => {
    const ex = await run('js', "import { readFileSync } from 'node:fs'\nimport path from 'path'\nimport * as os from 'os'\npath.basename('/a/b.txt') + ' ' + typeof os.hostname")
    assert.equal(ex.text, 'b.txt function')
    assert.equal((await run('js', "readFileSync('/etc/hostname', 'utf8').length > 0")).text, 'true')
    assert.equal((await run('js', "const { inspect } = await import('node:util'); typeof inspect")).text, 'function')
    assert.equal((await run('js', "require('crypto').createHash('sha256').update('').digest('hex').slice(0, 8)")).text, 'e3b0c442')
  })

  test('a thrown error gives its name, message and stack', async () => {
    const ex = await run('js', 'function f() { throw new TypeError("bad value 42") }\nf()', { expectError: true })
    assert.ok(ex.error, 'execution has an error')
    assert.equal(ex.error.name, 'TypeError')
    assert.equal(ex.error.value, 'bad value 42')
    assert.match(ex.error.traceback, /TypeError: bad value 42/)
    assert.match(ex.error.traceback, /at f /)
    const syntax = await run('js', 'let = = 1', { expectError: true })
    assert.equal(syntax.error && syntax.error.name, 'SyntaxError')
    // The kernel and its state survive.
    assert.equal((await run('js', 'counter')).text, '7')
  })

  test('an interrupted loop ends the call; the kernel and its state survive', async () => {
    await run('js', 'let kept = "kept"')
    await assert.rejects(sbx.runCode('while (true) {}', { language: 'js', timeoutMs: 2000 }))
    await assert.rejects(sbx.runCode('await new Promise(() => {})', { language: 'js', timeoutMs: 2000 }))
    assert.equal((await run('js', 'kept')).text, 'kept')
  })

  test('env vars: sandbox-wide and per call, the latter for that call only', async () => {
    assert.equal((await run('js', 'process.env.SBX_LANG_VAR')).text, 'sandbox-wide')
    assert.equal((await run('js', 'process.env.CALL_VAR', { envs: { CALL_VAR: 'only-now' } })).text, 'only-now')
    assert.equal((await run('js', 'String(process.env.CALL_VAR)')).text, 'undefined')
  })

  test('the working directory is /home/user', async () => {
    assert.equal((await run('js', 'process.cwd()')).text, '/home/user')
  })

  test('a javascript context is created and listed', async () => {
    await contextTest('javascript', 'typeof counter', 'undefined')
  })
})

describe('typescript', () => {
  test('a typed cell runs; its last expression is the result', async () => {
    const out = []
    const ex = await run('ts', [
      'interface Point { x: number; y: number }',
      'const p: Point = { x: 20, y: 22 }',
      'function sum(pt: Point): number { return pt.x + pt.y }',
      'console.log(`sum is ${sum(p)}`)',
      'sum(p) as number',
    ].join('\n'), { onStdout: (m) => out.push(m.line) })
    assert.equal(ex.text, '42')
    assert.equal(ex.logs.stdout.join(''), 'sum is 42\n')
    assert.equal(out.join(''), 'sum is 42\n')
  })

  test('state persists across calls; await and imports work', async () => {
    assert.equal((await run('typescript', 'enum Color { Red, Green }\nlet total: number = sum(p)')).text, undefined)
    assert.equal((await run('ts', 'total + Color.Green')).text, '43')
    const ex = await run('ts', "import { basename } from 'node:path'\nconst name: string = await Promise.resolve(basename('/x/y.ts'))\nname")
    assert.equal(ex.text, 'y.ts')
  })

  test('errors: a thrown error, and a cell that does not parse', async () => {
    const ex = await run('ts', 'const n: number = 1\nthrow new RangeError(`too far: ${n}`)', { expectError: true })
    assert.ok(ex.error, 'execution has an error')
    assert.equal(ex.error.name, 'RangeError')
    assert.equal(ex.error.value, 'too far: 1')
    const bad = await run('ts', 'let x: = 5', { expectError: true })
    assert.equal(bad.error && bad.error.name, 'SyntaxError')
    assert.match(bad.error.traceback, /TS1110/)
  })

  test('env vars and the working directory', async () => {
    assert.equal((await run('ts', 'process.env.SBX_LANG_VAR as string')).text, 'sandbox-wide')
    assert.equal((await run('ts', 'process.env.CALL_VAR', { envs: { CALL_VAR: 'ts-call' } })).text, 'ts-call')
    assert.equal((await run('ts', 'String(process.env.CALL_VAR)')).text, 'undefined')
    assert.equal((await run('ts', 'process.cwd()')).text, '/home/user')
  })

  test('a typescript context is created and listed', async () => {
    await contextTest('typescript', 'const s: string = "typed"\ns', 'typed')
  })
})

// IRkernel publishes a value as display_data, not execute_result, so an R
// value is a result that is not the main one, and execution.text stays
// unset, as with E2B's own R kernel.
describe('r', () => {
  const valueText = (ex) => ex.results.map((r) => r.text).join('\n')

  test('cat goes to stdout, message to stderr, a value is a result', async () => {
    const ex = await run('r', 'cat("hello\\n")\nmessage("oops")\n1 + 1')
    assert.equal(ex.logs.stdout.join(''), 'hello\n')
    assert.match(ex.logs.stderr.join(''), /^oops\n/)
    assert.equal(ex.results.length, 1)
    assert.equal(ex.results[0].text, '[1] 2')
    assert.equal((await run('r', 'print(1:3)')).logs.stdout.join(''), '[1] 1 2 3\n')
  })

  test('state persists across calls', async () => {
    await run('r', 'x <- 40\nadd <- function(n) x + n')
    assert.equal(valueText(await run('r', 'add(2)')), '[1] 42')
  })

  test('an error gives its name and message', async () => {
    const ex = await run('r', 'stop("bad value 42")', { expectError: true })
    assert.ok(ex.error, 'execution has an error')
    assert.equal(ex.error.name, 'ERROR')
    assert.match(ex.error.value, /bad value 42/)
    assert.match(ex.error.traceback, /stop\("bad value 42"\)/)
    assert.equal(valueText(await run('r', 'x')), '[1] 40')
  })

  test('env vars: sandbox-wide and per call, the latter for that call only', async () => {
    assert.equal((await run('r', 'cat(Sys.getenv("SBX_LANG_VAR"))')).logs.stdout.join(''), 'sandbox-wide')
    assert.equal((await run('r', 'cat(Sys.getenv("CALL_VAR"))', { envs: { CALL_VAR: 'r-call' } })).logs.stdout.join(''), 'r-call')
    assert.equal((await run('r', 'cat(Sys.getenv("CALL_VAR", unset = "unset"))')).logs.stdout.join(''), 'unset')
  })

  test('the working directory is /home/user', async () => {
    assert.equal((await run('r', 'cat(getwd())')).logs.stdout.join(''), '/home/user')
  })

  test('an r context is created and listed', async () => {
    await contextTest('r', 'cat("in a context\\n")', 'in a context\n')
  })
})

// Java runs on JShell in a JVM that starts with the first java cell. A
// String value is shown as its text, environment variables are system
// properties, as with E2B's Java kernel.
describe('java', () => {
  test('the first cell starts the JVM; an expression is the result, a String without quotes', async () => {
    const ex = await run('java', 'System.getProperty("user.dir")')
    assert.equal(ex.text, '/home/user')
    assert.equal(ex.results.length, 1)
    assert.equal(ex.results[0].isMainResult, true)
    assert.equal((await run('java', '6 * 7')).text, '42')
    assert.equal((await run('java', 'List.of("a", "b")')).text, '[a, b]')
    assert.equal((await run('java', 'int quiet = 1;')).text, undefined)
  })

  // Each print is a message of its own, as from E2B's Java kernel (IJava),
  // where println sends its text, then the line break: E2B's
  // test_java_kernel reads stdout[0] == 'Hello, World!'.
  test('System.out and System.err are streamed; a statement has no result', async () => {
    const out = []
    const ex = await run('java', 'System.out.println("Hello, World!");\nSystem.err.println("careful");', { onStdout: (m) => out.push(m.line) })
    assert.deepEqual(ex.logs.stdout, ['Hello, World!', '\n'])
    assert.equal(ex.logs.stderr.join(''), 'careful\n')
    assert.equal(out.join(''), 'Hello, World!\n')
    assert.deepEqual(ex.results, [])
  })

  test('variables, methods and classes persist across calls', async () => {
    await run('java', 'int total = 40;\nint add(int n) { total += n; return total; }\nrecord Pair(String left, String right) {}')
    assert.equal((await run('java', 'add(1);\nadd(1)')).text, '42')
    assert.equal((await run('java', 'new Pair("l", "r").right() + total')).text, 'r42')
  })

  test('a compile error and an exception are errors; the JVM and its state survive', async () => {
    const bad = await run('java', 'int ok = 1;\nString s = ok +;', { expectError: true })
    assert.ok(bad.error, 'a compile error is an error')
    assert.equal(bad.error.name, 'CompilationException')
    assert.match(bad.error.traceback, /line 2: error/)
    const thrown = await run('java', 'Object o = null;\no.toString();', { expectError: true })
    assert.ok(thrown.error, 'an exception is an error')
    assert.equal(thrown.error.name, 'java.lang.NullPointerException')
    assert.match(thrown.error.traceback, /^java\.lang\.NullPointerException/)
    assert.equal((await run('java', 'total')).text, '42')
  })

  test('an interrupted loop ends the call; the JVM and its state survive', async () => {
    await run('java', 'String kept = "kept";')
    await assert.rejects(sbx.runCode('while (true) { }', { language: 'java', timeoutMs: 3000 }))
    assert.equal((await run('java', 'kept')).text, 'kept')
  })

  test('env vars are system properties: sandbox-wide, and per call for that call only', async () => {
    assert.equal((await run('java', 'System.getProperty("SBX_LANG_VAR")')).text, 'sandbox-wide')
    assert.equal((await run('java', 'System.getProperty("CALL_VAR")', { envs: { CALL_VAR: "only now, \"quoted\" \\ it's" } })).text, "only now, \"quoted\" \\ it's")
    assert.equal((await run('java', 'System.getProperty("CALL_VAR", "unset")')).text, 'unset')
    assert.equal((await run('java', 'System.getProperty("SBX_LANG_VAR")', { envs: { SBX_LANG_VAR: 'for one call' } })).text, 'for one call')
    assert.equal((await run('java', 'System.getProperty("SBX_LANG_VAR")')).text, 'sandbox-wide')
  })

  test('a java context is created and listed', async () => {
    await contextTest('java', 'System.out.print("in a context ");\nSystem.getProperty("SBX_LANG_VAR")', 'in a context sandbox-wide')
  })
})
