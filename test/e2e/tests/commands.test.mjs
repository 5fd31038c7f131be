// Commands through the e2b SDK: foreground runs, environment, working
// directory, users, background processes with stdin, connect and kill.
import { describe, test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, CommandExitError } from 'e2b'
import { Tracker, eventually, rejection } from './helpers.mjs'

const tracker = new Tracker()
let sbx

before(async () => {
  sbx = tracker.add(await Sandbox.create({ envs: { SBX_LEVEL: 'sandbox', SBX_SHARED: 'from-sandbox' } }))
})
after(() => tracker.killAll(Sandbox))

describe('commands.run', () => {
  test('stdout, stderr and exit code', async () => {
    const r = await sbx.commands.run('echo out; echo err >&2; printf "no newline"')
    assert.equal(r.exitCode, 0)
    assert.equal(r.stdout, 'out\nno newline')
    assert.equal(r.stderr, 'err\n')
    assert.equal(r.error, undefined)
  })

  test('a failing command throws CommandExitError with its output', async () => {
    const err = await rejection(sbx.commands.run('echo partial; echo broken >&2; exit 3'))
    assert.ok(err instanceof CommandExitError, String(err))
    assert.equal(err.exitCode, 3)
    assert.equal(err.stdout, 'partial\n')
    assert.equal(err.stderr, 'broken\n')
    // E2B's agent sends the exit status as the error, which is the message.
    assert.equal(err.error, 'exit status 3')
    assert.match(err.message, /exit status 3/)
  })

  test('a command that does not exist exits 127', async () => {
    const err = await rejection(sbx.commands.run('definitely-not-a-command-xyz'))
    assert.ok(err instanceof CommandExitError, String(err))
    assert.equal(err.exitCode, 127)
    assert.match(err.stderr, /not found/)
  })

  test('output streams to callbacks as it is produced', async () => {
    const out = []
    const errs = []
    const r = await sbx.commands.run('for i in 1 2 3; do echo line$i; echo e$i >&2; done', {
      onStdout: (d) => out.push(d),
      onStderr: (d) => errs.push(d),
    })
    assert.equal(out.join(''), 'line1\nline2\nline3\n')
    assert.equal(errs.join(''), 'e1\ne2\ne3\n')
    assert.equal(r.stdout, out.join(''))
  })

  test('large output arrives whole', async () => {
    const r = await sbx.commands.run('head -c 3000000 /dev/zero | tr "\\0" x')
    assert.equal(r.stdout.length, 3_000_000)
    assert.ok(/^x+$/.test(r.stdout))
  })

  test('sandbox-level envs are visible, per-call envs add to and override them', async () => {
    const r1 = await sbx.commands.run('echo "$SBX_LEVEL|$SBX_SHARED"')
    assert.equal(r1.stdout, 'sandbox|from-sandbox\n')
    const r2 = await sbx.commands.run('echo "$SBX_LEVEL|$SBX_SHARED|$CALL_ONLY"', {
      envs: { SBX_SHARED: 'from-call', CALL_ONLY: 'call value with spaces' },
    })
    assert.equal(r2.stdout, 'sandbox|from-call|call value with spaces\n')
    // A per-call variable does not leak into the next command.
    const r3 = await sbx.commands.run('echo "[$CALL_ONLY]|$SBX_SHARED"')
    assert.equal(r3.stdout, '[]|from-sandbox\n')
  })

  test('cwd', async () => {
    const r = await sbx.commands.run('pwd', { cwd: '/tmp' })
    assert.equal(r.stdout, '/tmp\n')
    await sbx.commands.run('mkdir -p "/home/user/work dir"')
    const r2 = await sbx.commands.run('pwd', { cwd: '/home/user/work dir' })
    assert.equal(r2.stdout, '/home/user/work dir\n')
  })

  test('user: the default is user, root on request', async () => {
    const r = await sbx.commands.run('whoami; echo $HOME; pwd')
    assert.equal(r.stdout, 'user\n/home/user\n/home/user\n')
    const root = await sbx.commands.run('whoami; id -u', { user: 'root' })
    assert.equal(root.stdout, 'root\n0\n')
    const u = await sbx.commands.run('whoami', { user: 'user' })
    assert.equal(u.stdout, 'user\n')
    // A file made as user belongs to user; root may write where user may not.
    await sbx.commands.run('touch /home/user/owned')
    const owner = await sbx.commands.run('stat -c %U /home/user/owned')
    assert.equal(owner.stdout, 'user\n')
    const denied = await rejection(sbx.commands.run('touch /root/nope'))
    assert.ok(denied instanceof CommandExitError)
    assert.notEqual(denied.exitCode, 0)
    await sbx.commands.run('touch /root/yes', { user: 'root' })
  })
})

describe('background processes', () => {
  test('sendStdin, list, connect and wait', async () => {
    const handle = await sbx.commands.run('read first; echo "got:$first"; read second; echo "got:$second"; exit 4', {
      background: true, stdin: true,
    })
    assert.ok(handle.pid > 0)
    const listed = await sbx.commands.list()
    assert.ok(listed.some((p) => p.pid === handle.pid), 'the process is listed while it runs')

    await sbx.commands.sendStdin(handle.pid, 'one\n')
    await eventually(() => handle.stdout.includes('got:one'), { what: 'first echo' })

    // A second client attaches by pid and sees the rest.
    const seen = []
    const attached = await sbx.commands.connect(handle.pid, { onStdout: (d) => seen.push(d) })
    await sbx.commands.sendStdin(handle.pid, 'two\n')
    const err = await rejection(attached.wait())
    assert.ok(err instanceof CommandExitError, String(err))
    assert.equal(err.exitCode, 4)
    assert.ok(seen.join('').includes('got:two'), `attached client saw: ${JSON.stringify(seen.join(''))}`)

    const err2 = await rejection(handle.wait())
    assert.equal(err2.exitCode, 4)
    assert.equal(err2.stdout, 'got:one\ngot:two\n')
  })

  test('a background process outlives its client and can be killed', async () => {
    const handle = await sbx.commands.run('echo started; sleep 600', { background: true })
    await eventually(() => handle.stdout.includes('started'), { what: 'background output' })
    await handle.disconnect()
    // Still running after the client went away.
    const listed = await sbx.commands.list()
    assert.ok(listed.some((p) => p.pid === handle.pid), 'running after disconnect')
    const again = await sbx.commands.connect(handle.pid)
    assert.equal(await sbx.commands.kill(handle.pid), true)
    const err = await rejection(again.wait())
    assert.ok(err instanceof CommandExitError, String(err))
    await eventually(async () => !(await sbx.commands.list()).some((p) => p.pid === handle.pid), { what: 'process to leave the list' })
    // Killing a process that is gone reports false.
    assert.equal(await sbx.commands.kill(handle.pid), false)
  })

  test('handle.kill ends a running command', async () => {
    const handle = await sbx.commands.run('sleep 600', { background: true })
    assert.equal(await handle.kill(), true)
    const err = await rejection(handle.wait())
    assert.ok(err instanceof CommandExitError, String(err))
  })
})

describe('a sandbox killed while a command runs', () => {
  // The SDK gives up on a silent stream by itself after 30 s; before the
  // proxy ended the streams of a stopped sandbox, that was the only way
  // wait() ended. It must end with the sandbox, well before that.
  test('ends the command\'s wait with an error', { timeout: 60_000 }, async () => {
    const victim = tracker.add(await Sandbox.create())
    const cmd = await victim.commands.run('sleep 600', { background: true, timeoutMs: 0 })
    const waiting = rejection(cmd.wait())
    const killedAt = Date.now()
    await victim.kill()
    const err = await waiting
    assert.ok(err instanceof Error, `wait() ended with ${err}`)
    const took = Date.now() - killedAt
    assert.ok(took < 20_000, `wait() ended ${took} ms after the kill: the stream outlived its sandbox`)
  })
})
