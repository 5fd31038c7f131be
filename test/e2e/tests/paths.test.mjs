// How envd resolves and prepares paths, as E2B's agent does: a write
// creates missing parent directories for the acting user wherever they
// are, a relative path lives in that user's home, and removing what is
// not there succeeds.
import { describe, test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'
import { Tracker, runTag } from './helpers.mjs'

const tracker = new Tracker()
let sbx

// One sandbox for the file: every test writes under names of its own.
before(async () => { sbx = tracker.add(await Sandbox.create({ secure: true })) })
after(() => tracker.killAll(Sandbox))

describe('paths', () => {
  test('a write makes missing parents, even below /, owned by the user, 0755', async () => {
    const top = `/newdir-${runTag}`
    const info = await sbx.files.write(`${top}/a/b.txt`, 'nested')
    assert.equal(info.path, `${top}/a/b.txt`)
    assert.equal(await sbx.files.read(`${top}/a/b.txt`), 'nested')
    for (const dir of [top, `${top}/a`]) {
      const d = await sbx.files.getInfo(dir)
      assert.equal(d.owner, 'user', dir)
      assert.equal(d.group, 'user', dir)
      assert.equal(d.mode, 0o755, `${dir}: mode ${d.mode.toString(8)}`)
    }
    assert.equal((await sbx.files.getInfo(`${top}/a/b.txt`)).owner, 'user')
    // The directory that was already there keeps its owner.
    assert.equal((await sbx.files.getInfo('/')).owner, 'root')
  })

  test('a relative path is in the acting user\'s home', async () => {
    const name = `rel-${runTag}.txt`
    const mine = await sbx.files.write(name, 'user')
    assert.equal(mine.path, `/home/user/${name}`)
    const roots = await sbx.files.write(name, 'root', { user: 'root' })
    assert.equal(roots.path, `/root/${name}`)
    assert.equal(await sbx.files.read(name), 'user')
    assert.equal(await sbx.files.read(name, { user: 'root' }), 'root')
  })

  test('removing a path that is not there succeeds', async () => {
    await sbx.files.remove(`/never-${runTag}/here.txt`)
    await sbx.files.remove(`never-${runTag}.txt`)
  })
})
