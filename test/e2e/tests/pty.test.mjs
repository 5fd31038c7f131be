// Interactive terminals through the e2b SDK: a real pseudo-terminal with
// input, output, resize and kill.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'
import { Tracker, eventually, rejection } from './helpers.mjs'

const tracker = new Tracker()
let sbx

before(async () => { sbx = tracker.add(await Sandbox.create()) })
after(() => tracker.killAll(Sandbox))

const encoder = new TextEncoder()

function terminal() {
  const decoder = new TextDecoder()
  const t = { text: '', onData: (d) => { t.text += decoder.decode(d, { stream: true }) } }
  return t
}

test('pty: input, output, resize and kill', async () => {
  const out = terminal()
  const pty = await sbx.pty.create({ cols: 80, rows: 24, onData: out.onData, envs: { PTY_VAR: 'pty-env' } })
  assert.ok(pty.pid > 0)

  await sbx.pty.sendInput(pty.pid, encoder.encode('echo "marker-$((6*7))-$PTY_VAR"\n'))
  await eventually(() => out.text.includes('marker-42-pty-env'), { what: 'echoed output in the terminal' })

  // A real terminal: a tty on stdin, TERM set, the size we asked for.
  await sbx.pty.sendInput(pty.pid, encoder.encode('tty >/dev/null && echo "is-a-tty $TERM"; stty size\n'))
  await eventually(() => out.text.includes('is-a-tty xterm') && out.text.includes('24 80'), { what: 'tty facts' })

  await sbx.pty.resize(pty.pid, { cols: 132, rows: 40 })
  await sbx.pty.sendInput(pty.pid, encoder.encode('stty size\n'))
  await eventually(() => out.text.includes('40 132'), { what: 'the new size' })

  // Ctrl-C interrupts the foreground job, not the shell. The ^C is sent
  // once the job runs: sent earlier, it would reach the shell instead.
  await sbx.pty.sendInput(pty.pid, encoder.encode('sleep 600\n'))
  const sleeping = 'for p in /proc/[0-9]*; do [ "$(cat $p/comm 2>/dev/null)" = sleep ] && exit 0; done; exit 1'
  await eventually(async () => (await sbx.commands.run(sleeping).catch(() => ({ exitCode: 1 }))).exitCode === 0, { what: 'sleep to run in the terminal' })
  await sbx.pty.sendInput(pty.pid, encoder.encode('\x03'))
  await sbx.pty.sendInput(pty.pid, encoder.encode('echo after-$((1+1))-interrupt\n'))
  await eventually(() => out.text.includes('after-2-interrupt'), { what: 'the shell after ^C' })

  assert.equal(await sbx.pty.kill(pty.pid), true)
  const err = await rejection(pty.wait())
  assert.ok(err, 'a killed terminal does not end successfully')
  await eventually(async () => !(await sbx.commands.list()).some((p) => p.pid === pty.pid), { what: 'the terminal to leave the process list' })
})

test('pty: exit ends the session with the exit code', async () => {
  const out = terminal()
  const pty = await sbx.pty.create({ cols: 80, rows: 24, onData: out.onData })
  await sbx.pty.sendInput(pty.pid, encoder.encode('exit 0\n'))
  const r = await pty.wait()
  assert.equal(r.exitCode, 0)
})
