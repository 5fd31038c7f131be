// An older e2b 2.x release (pinned as e2b-old), which creates sandboxes
// with POST /sandboxes and attaches with POST /sandboxes/{id}/connect.
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { Sandbox, CommandExitError } from 'e2b-old'
import { Tracker, rejection, runTag } from './helpers.mjs'

const tracker = new Tracker()
after(() => tracker.killAll(Sandbox))

test('the pinned older SDK is really the older release', () => {
  const pkg = JSON.parse(readFileSync(new URL('../node_modules/e2b-old/package.json', import.meta.url)))
  assert.equal(pkg.version, '2.20.0')
})

test('older SDK: create, commands, files, connect, list, kill', async () => {
  const sbx = tracker.add(await Sandbox.create({ metadata: { old: runTag }, envs: { OLD_VAR: 'old-sdk' } }))
  assert.match(sbx.sandboxId, /^[a-z0-9]+$/)

  const r = await sbx.commands.run('echo "$OLD_VAR"; whoami')
  assert.equal(r.stdout, 'old-sdk\nuser\n')
  const err = await rejection(sbx.commands.run('exit 7'))
  assert.ok(err instanceof CommandExitError, String(err))
  assert.equal(err.exitCode, 7)

  await sbx.files.write('/home/user/old.txt', 'written by the older SDK')
  assert.equal(await sbx.files.read('/home/user/old.txt'), 'written by the older SDK')
  const bytes = new Uint8Array([0, 1, 2, 253, 254, 255])
  await sbx.files.write('/home/user/old.bin', bytes.buffer)
  assert.deepEqual([...await sbx.files.read('/home/user/old.bin', { format: 'bytes' })], [...bytes])
  assert.deepEqual((await sbx.files.list('/home/user')).filter((e) => e.name.startsWith('old.')).map((e) => e.name).sort(), ['old.bin', 'old.txt'])

  const info = await sbx.getInfo()
  assert.equal(info.sandboxId, sbx.sandboxId)
  assert.deepEqual(info.metadata, { old: runTag })

  const again = await Sandbox.connect(sbx.sandboxId)
  assert.equal((await again.commands.run('cat /home/user/old.txt')).stdout, 'written by the older SDK')

  const listed = await Sandbox.list({ query: { metadata: { old: runTag } } }).nextItems()
  assert.deepEqual(listed.map((s) => s.sandboxId), [sbx.sandboxId])

  assert.equal(await Sandbox.kill(sbx.sandboxId), true)
  assert.equal(await Sandbox.kill(sbx.sandboxId), false)
  assert.equal(await sbx.isRunning(), false)
})
