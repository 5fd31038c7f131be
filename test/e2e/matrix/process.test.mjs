// The matrix's commands and terminals, through the release CUBE_E2E_SDK
// names (sdk.mjs).
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, CommandExitError } from './sdk.mjs'
import { Tracker, eventually, rejection } from '../tests/helpers.mjs'

const tracker = new Tracker()
let sbx

before(async () => { sbx = tracker.add(await Sandbox.create()) })
after(() => tracker.killAll(Sandbox))

test('commands.run: stdout, stderr, exit code, envs, cwd, user', async () => {
  const r = await sbx.commands.run('echo out; echo err >&2; echo "$CALL_VAR"; pwd', { envs: { CALL_VAR: 'per call' }, cwd: '/tmp' })
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout, 'out\nper call\n/tmp\n')
  assert.equal(r.stderr, 'err\n')
  assert.equal((await sbx.commands.run('whoami', { user: 'root' })).stdout, 'root\n')
  const err = await rejection(sbx.commands.run('echo partial; exit 3'))
  assert.ok(err instanceof CommandExitError, String(err))
  assert.equal(err.exitCode, 3)
  assert.equal(err.stdout, 'partial\n')
})

test('background command: stdin, list, connect, kill', async () => {
  const handle = await sbx.commands.run('read line; echo "got:$line"; sleep 600', { background: true, stdin: true })
  assert.ok(handle.pid > 0)
  assert.ok((await sbx.commands.list()).some((p) => p.pid === handle.pid), 'listed while it runs')
  await sbx.commands.sendStdin(handle.pid, 'hello\n')
  await eventually(() => handle.stdout.includes('got:hello'), { what: 'the echoed stdin' })
  const attached = await sbx.commands.connect(handle.pid)
  assert.equal(await sbx.commands.kill(handle.pid), true)
  const err = await rejection(attached.wait())
  assert.ok(err instanceof CommandExitError, String(err))
  await eventually(async () => !(await sbx.commands.list()).some((p) => p.pid === handle.pid), { what: 'the process to leave the list' })
})

test('pty: input, output, resize, exit', async () => {
  const decoder = new TextDecoder()
  let text = ''
  const pty = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { text += decoder.decode(d, { stream: true }) } })
  const send = (s) => sbx.pty.sendInput(pty.pid, new TextEncoder().encode(s))
  await send('echo "marker-$((6*7))"; stty size\n')
  await eventually(() => text.includes('marker-42') && text.includes('24 80'), { what: () => `the terminal's output, got ${JSON.stringify(text)}` })
  await sbx.pty.resize(pty.pid, { cols: 132, rows: 40 })
  await send('stty size\n')
  await eventually(() => text.includes('40 132'), { what: 'the new size' })
  await send('exit 0\n')
  assert.equal((await pty.wait()).exitCode, 0)
})
