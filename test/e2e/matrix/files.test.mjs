// The matrix's files and watchers, through the release CUBE_E2E_SDK names
// (sdk.mjs).
import { test, beforeEach, afterEach, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, FileType, FilesystemEventType } from './sdk.mjs'
import { Tracker, eventually } from '../tests/helpers.mjs'

const tracker = new Tracker()
let sbx

beforeEach(async () => { sbx = tracker.add(await Sandbox.create()) })
afterEach(() => tracker.killAll(Sandbox))
after(() => tracker.killAll(Sandbox))

const home = '/home/user'

test('files: write, read, list, makeDir, getInfo, rename, remove', async () => {
  const dir = `${home}/tree`
  assert.equal(await sbx.files.makeDir(dir), true)
  await sbx.files.write(`${dir}/a.txt`, 'héllo\n')
  const bytes = new Uint8Array([0, 1, 2, 253, 254, 255])
  await sbx.files.write(`${dir}/sub/b.bin`, bytes.buffer)
  assert.equal(await sbx.files.read(`${dir}/a.txt`), 'héllo\n')
  assert.deepEqual([...await sbx.files.read(`${dir}/sub/b.bin`, { format: 'bytes' })], [...bytes])
  const listed = await sbx.files.list(dir)
  assert.deepEqual(listed.map((e) => `${e.name}:${e.type}`).sort(), ['a.txt:file', 'sub:dir'])
  const info = await sbx.files.getInfo(`${dir}/a.txt`)
  assert.equal(info.type, FileType.FILE)
  assert.equal(info.path, `${dir}/a.txt`)
  await sbx.files.rename(`${dir}/a.txt`, `${dir}/sub/moved.txt`)
  assert.equal(await sbx.files.exists(`${dir}/a.txt`), false)
  assert.equal(await sbx.files.read(`${dir}/sub/moved.txt`), 'héllo\n')
  assert.equal((await sbx.commands.run(`stat -c %U ${dir}/sub/moved.txt`)).stdout, 'user\n')
  await sbx.files.remove(dir)
  assert.equal(await sbx.files.exists(dir), false)
})

// E2B's agent describes a link by what it points at (a link to a file is a
// file, with its target), which every release can read. Releases before
// e2b 2.36 fail to read a whole listing holding FILE_TYPE_SYMLINK.
test('files: a directory holding symlinks lists, each link as what it points at', async () => {
  const dir = `${home}/links`
  await sbx.files.write(`${dir}/target.txt`, 'pointed at')
  await sbx.files.makeDir(`${dir}/realdir`)
  await sbx.commands.run(`cd ${dir} && ln -s target.txt link.txt && ln -s realdir linkdir && ln -s missing dangling`)

  const listed = await sbx.files.list(dir)
  const byName = Object.fromEntries(listed.map((e) => [e.name, e]))
  assert.equal(byName['target.txt']?.type, FileType.FILE)
  assert.equal(byName['link.txt']?.type, FileType.FILE, JSON.stringify(listed))
  assert.equal(byName['link.txt'].symlinkTarget, `${dir}/target.txt`)
  assert.equal(byName.realdir?.type, FileType.DIR)
  assert.equal(byName.linkdir?.type, FileType.DIR, JSON.stringify(listed))
  assert.equal(byName.linkdir.symlinkTarget, `${dir}/realdir`)

  const info = await sbx.files.getInfo(`${dir}/link.txt`)
  assert.equal(info.name, 'link.txt')
  assert.equal(info.type, FileType.FILE)
  assert.equal(info.symlinkTarget, `${dir}/target.txt`)
  assert.equal(await sbx.files.read(`${dir}/link.txt`), 'pointed at')

  // A link to nothing is a symlink to a release that knows the type; to
  // the others it is of no type they know, which they leave out of a
  // listing, as they do with E2B's agent.
  if (FileType.SYMLINK) {
    assert.equal(byName.dangling?.type, FileType.SYMLINK, JSON.stringify(listed))
    assert.equal(byName.dangling.symlinkTarget, `${dir}/missing`)
  } else {
    assert.equal(byName.dangling, undefined, JSON.stringify(listed))
  }
})

// The events E2B's agent reports (its watcher on Linux's inotify) for each
// file operation, in order: a new file written is created, given to its
// user and written; an existing one is given to its user, then truncated
// and written (one write or two, as the kernel merges them or not).
test('watchDir: E2B\'s events for write, overwrite, chmod, rename, makeDir and remove', async () => {
  const dir = `${home}/watched`
  await sbx.files.makeDir(dir)
  const events = []
  const handle = await sbx.files.watchDir(dir, (e) => { events.push(`${e.type} ${e.name}`) })
  // Runs op and returns the events it caused: waits for want of them,
  // then for quiet (the events of one operation come together), so one
  // too many is seen too.
  async function during(op, want) {
    const from = events.length
    await op()
    const seen = () => events.slice(from)
    await eventually(() => seen().length >= want, { what: () => `${want} events, got ${JSON.stringify(seen())}` })
    await new Promise((r) => setTimeout(r, 750))
    return seen()
  }
  const { CREATE, WRITE, CHMOD, RENAME, REMOVE } = FilesystemEventType
  try {
    assert.deepEqual(await during(() => sbx.files.write(`${dir}/new.txt`, 'first'), 3),
      [`${CREATE} new.txt`, `${CHMOD} new.txt`, `${WRITE} new.txt`])
    const overwrite = await during(() => sbx.files.write(`${dir}/new.txt`, 'second'), 2)
    assert.equal(overwrite[0], `${CHMOD} new.txt`, JSON.stringify(overwrite))
    assert.ok(overwrite.length <= 3 && overwrite.slice(1).every((e) => e === `${WRITE} new.txt`), JSON.stringify(overwrite))
    assert.deepEqual(await during(() => sbx.commands.run(`chmod 600 ${dir}/new.txt`), 1), [`${CHMOD} new.txt`])
    assert.deepEqual(await during(() => sbx.files.rename(`${dir}/new.txt`, `${dir}/moved.txt`), 2),
      [`${RENAME} new.txt`, `${CREATE} moved.txt`])
    assert.deepEqual(await during(() => sbx.files.makeDir(`${dir}/sub`), 2), [`${CREATE} sub`, `${CHMOD} sub`])
    assert.deepEqual(await during(() => sbx.files.remove(`${dir}/moved.txt`), 1), [`${REMOVE} moved.txt`])
  } finally {
    await handle.stop()
  }
})

// E2B's test_watch_recursive_directory_changes: three events, the first
// the create, named below the watched directory.
test('watchDir recursive: a file written in a subdirectory', async () => {
  const dir = `${home}/watched-rec`
  await sbx.files.makeDir(`${dir}/nested`)
  const events = []
  const handle = await sbx.files.watchDir(dir, (e) => { events.push(`${e.type} ${e.name}`) }, { recursive: true })
  try {
    await sbx.files.write(`${dir}/nested/file.txt`, 'deep')
    await eventually(() => events.length >= 3, { what: () => `3 events, got ${JSON.stringify(events)}` })
    await new Promise((r) => setTimeout(r, 500))
    const { CREATE, WRITE, CHMOD } = FilesystemEventType
    assert.deepEqual(events, [`${CREATE} nested/file.txt`, `${CHMOD} nested/file.txt`, `${WRITE} nested/file.txt`])
  } finally {
    await handle.stop()
  }
})
