// A pause that keeps no memory (E2B's keepMemory: false): the sandbox's
// files are kept, its memory is not, and a resume boots it afresh.
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'
import { Tracker, rawRequest } from './helpers.mjs'

const tracker = new Tracker()
after(() => tracker.killAll(Sandbox))

const bootID = async (sbx) => (await sbx.commands.run('cat /proc/sys/kernel/random/boot_id')).stdout.trim()

test('a pause without memory keeps files, drops processes and reboots on resume', async () => {
  const sbx = tracker.add(await Sandbox.create({ envs: { CREATED_WITH: 'this value' } }))
  await sbx.files.write('/home/user/notes/kept.txt', 'written before the pause')
  await sbx.commands.run('echo root was here | sudo tee /etc/cube-pause-marker >/dev/null && rm /home/user/.bashrc')
  await sbx.commands.run('sleep 3600', { background: true })
  const before = await bootID(sbx)

  await sbx.pause({ keepMemory: false })
  assert.equal(await sbx.isRunning(), false)
  assert.equal((await sbx.getInfo()).state, 'paused')

  await sbx.connect()
  assert.equal(await sbx.isRunning(), true)
  assert.notEqual(await bootID(sbx), before, 'a resume without memory is a fresh boot')
  // What was written is there, as the user left it, and what was deleted stays deleted.
  assert.equal(await sbx.files.read('/home/user/notes/kept.txt'), 'written before the pause')
  const owner = await sbx.commands.run('stat -c %U /home/user/notes/kept.txt')
  assert.equal(owner.stdout.trim(), 'user')
  assert.equal((await sbx.commands.run('cat /etc/cube-pause-marker')).stdout, 'root was here\n')
  assert.equal(await sbx.files.exists('/home/user/.bashrc'), false)
  // Processes are gone; the sandbox's environment and token still hold.
  const ps = await sbx.commands.run('pgrep -x sleep', { timeoutMs: 10_000 }).catch((e) => e)
  assert.equal(ps.exitCode, 1, 'the background sleep did not survive the reboot')
  assert.equal((await sbx.commands.run('echo "$CREATED_WITH"')).stdout, 'this value\n')
  // Files written after the resume land too, and a second pause keeps both.
  await sbx.files.write('/home/user/notes/after.txt', 'after the resume')
  await sbx.pause({ keepMemory: false })
  await sbx.connect()
  assert.equal(await sbx.files.read('/home/user/notes/kept.txt'), 'written before the pause')
  assert.equal(await sbx.files.read('/home/user/notes/after.txt'), 'after the resume')
  // The code interpreter's agent answers in the rebooted sandbox too.
  assert.equal((await sbx.commands.run('python3 -c "print(6*7)"')).stdout, '42\n')
  await sbx.kill()
})

test('auto-pause without memory at the timeout, resumed by connect', async () => {
  const sbx = tracker.add(await Sandbox.create({
    timeoutMs: 3_000,
    lifecycle: { onTimeout: { action: 'pause', keepMemory: false } },
  }))
  await sbx.files.write('/home/user/auto.txt', 'kept through the auto-pause')
  const before = await bootID(sbx)
  const deadline = Date.now() + 60_000
  while ((await sbx.getInfo()).state !== 'paused') {
    assert.ok(Date.now() < deadline, 'the sandbox was not paused at its timeout')
    await new Promise((r) => setTimeout(r, 250))
  }
  await sbx.connect({ timeoutMs: 60_000 })
  assert.equal(await sbx.files.read('/home/user/auto.txt'), 'kept through the auto-pause')
  assert.notEqual(await bootID(sbx), before)
  await sbx.kill()
})

test('traffic does not wake a sandbox paused without memory, even with auto-resume', async () => {
  const sbx = tracker.add(await Sandbox.create({ lifecycle: { onTimeout: 'pause', autoResume: true } }))
  await sbx.commands.run('python3 -m http.server 8000', { background: true })
  await sbx.pause({ keepMemory: false })
  const r = await rawRequest('/', { headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '8000' } })
  assert.equal(r.status, 502)
  assert.match(r.body.toString(), /paused without its memory.*connect/)
  assert.equal((await sbx.getInfo()).state, 'paused', 'a request to a port resumed it')
  await sbx.connect()
  assert.equal(await sbx.isRunning(), true)
  await sbx.kill()
})
