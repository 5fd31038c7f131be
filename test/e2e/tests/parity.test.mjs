// Details E2B's SDKs and their users rely on, each as E2B behaves: the
// template's tools (sudo for the sandbox user, git, python), and request
// validation before lookups.
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'
import { Tracker } from './helpers.mjs'

const tracker = new Tracker()
after(() => tracker.killAll(Sandbox))

test('the sandbox user becomes root with sudo, without a password', async () => {
  const sbx = tracker.add(await Sandbox.create())
  const r = await sbx.commands.run('sudo -n whoami')
  assert.equal(r.stdout, 'root\n')
  // Per-command environment variables stay with their command.
  const scoped = await sbx.commands.run('echo "$FOO"', { envs: { FOO: 'bar' } })
  assert.equal(scoped.stdout, 'bar\n')
  assert.equal((await sbx.commands.run('sudo echo "$FOO"')).stdout, '\n')
  await sbx.kill()
})

test('git and the tools E2B\'s template has are there', async () => {
  const sbx = tracker.add(await Sandbox.create())
  for (const tool of ['git --version', 'curl --version', 'ss -V', 'pgrep -V', 'python3 --version']) {
    const r = await sbx.commands.run(tool)
    assert.equal(r.exitCode, 0, tool)
  }
  await sbx.git.init('/home/user/repo')
  const st = await sbx.git.status('/home/user/repo')
  assert.ok(st, 'git status of a new repository')
  await sbx.kill()
})

test('a fork count below 1 is refused as a bad request, whatever the sandbox', async () => {
  await assert.rejects(Sandbox.fork('sbx-test', { count: 0 }), (err) => {
    assert.equal(err.statusCode, 400, String(err))
    assert.match(err.message, /count must be between 1 and/)
    return true
  })
})
