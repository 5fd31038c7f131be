// Files through the e2b SDK: read and write, directory operations, entry
// info, watching, and signed upload/download URLs.
import { describe, test, beforeEach, afterEach, after } from 'node:test'
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { Sandbox, FileType, FilesystemEventType, NotFoundError } from 'e2b'
import { Tracker, eventually, rejection } from './helpers.mjs'

const tracker = new Tracker()
let sbx

// A fresh sandbox per test, so one test's damage never shows up as
// another test's failure.
beforeEach(async () => { sbx = tracker.add(await Sandbox.create({ secure: true })) })
afterEach(() => tracker.killAll(Sandbox))
after(() => tracker.killAll(Sandbox))

const home = '/home/user'

describe('read and write', () => {
  test('text round trip, creating parent directories', async () => {
    const path = `${home}/deep/er/hello.txt`
    const text = 'héllo wörld\nsecond line ✓\n'
    const info = await sbx.files.write(path, text)
    assert.equal(info.path, path)
    assert.equal(info.name, 'hello.txt')
    assert.equal(await sbx.files.read(path), text)
    const r = await sbx.commands.run(`cat ${path}; stat -c %U ${path}`)
    assert.equal(r.stdout, text + 'user\n')
  })

  test('bytes round trip: every byte value, and a larger binary file', async () => {
    const all = new Uint8Array(256).map((_, i) => i)
    await sbx.files.write(`${home}/bytes.bin`, all.buffer)
    const back = await sbx.files.read(`${home}/bytes.bin`, { format: 'bytes' })
    assert.deepEqual(Buffer.from(back), Buffer.from(all))

    const big = Buffer.alloc(5 * 1024 * 1024)
    for (let i = 0; i < big.length; i++) big[i] = (i * 7919) & 0xff
    const sum = createHash('sha256').update(big).digest('hex')
    await sbx.files.write(`${home}/big.bin`, big.buffer.slice(big.byteOffset, big.byteOffset + big.length))
    const r = await sbx.commands.run(`sha256sum ${home}/big.bin`)
    assert.equal(r.stdout.split(' ')[0], sum)
    const readBig = await sbx.files.read(`${home}/big.bin`, { format: 'bytes' })
    assert.equal(createHash('sha256').update(readBig).digest('hex'), sum)
  })

  test('a file written by a command reads back, as blob too', async () => {
    await sbx.commands.run(`printf 'made by bash' > ${home}/from-bash.txt`)
    assert.equal(await sbx.files.read(`${home}/from-bash.txt`), 'made by bash')
    const blob = await sbx.files.read(`${home}/from-bash.txt`, { format: 'blob' })
    assert.equal(await blob.text(), 'made by bash')
  })

  test('several files in one call', async () => {
    const infos = await sbx.files.write([
      { path: `${home}/multi/a.txt`, data: 'A' },
      { path: `${home}/multi/b.txt`, data: 'B' },
    ])
    assert.deepEqual(infos.map((i) => i.name).sort(), ['a.txt', 'b.txt'])
    assert.equal(await sbx.files.read(`${home}/multi/a.txt`), 'A')
    assert.equal(await sbx.files.read(`${home}/multi/b.txt`), 'B')
  })

  test('writing as root makes a root-owned file', async () => {
    await sbx.files.write('/root-owned.txt', 'root', { user: 'root' })
    const r = await sbx.commands.run('stat -c %U /root-owned.txt')
    assert.equal(r.stdout, 'root\n')
  })

  test('reading a missing file is a not-found error', async () => {
    const err = await rejection(sbx.files.read(`${home}/missing.txt`))
    assert.ok(err instanceof NotFoundError, String(err))
  })
})

describe('directories and entries', () => {
  test('makeDir, list, exists, getInfo, rename, remove', async () => {
    const dir = `${home}/tree`
    assert.equal(await sbx.files.makeDir(dir), true)
    assert.equal(await sbx.files.makeDir(dir), false, 'a second makeDir reports it already existed')
    assert.equal(await sbx.files.exists(dir), true)

    await sbx.files.write(`${dir}/one.txt`, '12345')
    await sbx.files.makeDir(`${dir}/sub`)
    await sbx.files.write(`${dir}/sub/two.txt`, 'x')

    const top = await sbx.files.list(dir)
    assert.deepEqual(top.map((e) => `${e.name}:${e.type}`).sort(), ['one.txt:file', 'sub:dir'])
    const deep = await sbx.files.list(dir, { depth: 2 })
    assert.deepEqual(deep.map((e) => e.path).sort(), [`${dir}/one.txt`, `${dir}/sub`, `${dir}/sub/two.txt`])

    const info = await sbx.files.getInfo(`${dir}/one.txt`)
    assert.equal(info.name, 'one.txt')
    assert.equal(info.type, FileType.FILE)
    assert.equal(info.path, `${dir}/one.txt`)
    assert.equal(info.size, 5)
    assert.equal(info.owner, 'user')
    assert.match(info.permissions, /^-rw/)
    assert.ok(info.modifiedTime instanceof Date)
    const dinfo = await sbx.files.getInfo(`${dir}/sub`)
    assert.equal(dinfo.type, FileType.DIR)

    const moved = await sbx.files.rename(`${dir}/one.txt`, `${dir}/sub/renamed.txt`)
    assert.equal(moved.path, `${dir}/sub/renamed.txt`)
    assert.equal(await sbx.files.exists(`${dir}/one.txt`), false)
    assert.equal(await sbx.files.read(`${dir}/sub/renamed.txt`), '12345')

    await sbx.files.remove(`${dir}/sub/renamed.txt`)
    assert.equal(await sbx.files.exists(`${dir}/sub/renamed.txt`), false)
    await sbx.files.remove(dir)
    // Removing what is not there is done already, as on E2B.
    await sbx.files.remove(dir)
    assert.equal(await sbx.files.exists(dir), false)
    assert.equal(await sbx.files.exists(`${home}/never-was`), false)
  })

  test('getInfo of a missing path is a not-found error', async () => {
    const err = await rejection(sbx.files.getInfo(`${home}/not-here`))
    assert.ok(err instanceof NotFoundError, String(err))
  })

  test('symlinks are reported as such', async () => {
    await sbx.files.write(`${home}/target.txt`, 't')
    await sbx.commands.run(`ln -sf ${home}/target.txt ${home}/link.txt`)
    const info = await sbx.files.getInfo(`${home}/link.txt`)
    assert.equal(info.symlinkTarget, `${home}/target.txt`)
  })
})

describe('watchDir', () => {
  test('reports create, write, rename and remove events', async () => {
    const dir = `${home}/watched`
    await sbx.files.makeDir(dir)
    const events = []
    let ended = 'still open'
    const handle = await sbx.files.watchDir(dir, (e) => { events.push(e) }, { onExit: (err) => { ended = `ended: ${err}` } })
    const seen = () => `events ${JSON.stringify(events)}, watch ${ended}`
    try {
      await sbx.files.write(`${dir}/new.txt`, 'first')
      await eventually(() => events.some((e) => e.name === 'new.txt' && e.type === FilesystemEventType.CREATE), { what: () => `create event (${seen()})` })
      await eventually(() => events.some((e) => e.name === 'new.txt' && e.type === FilesystemEventType.WRITE), { what: () => `write event (${seen()})` })
      await sbx.files.rename(`${dir}/new.txt`, `${dir}/moved.txt`)
      await eventually(() => events.some((e) => e.name === 'new.txt' && e.type === FilesystemEventType.RENAME), { what: () => `rename event (${seen()})` })
      await sbx.files.remove(`${dir}/moved.txt`)
      await eventually(() => events.some((e) => e.name === 'moved.txt' && e.type === FilesystemEventType.REMOVE), { what: () => `remove event (${seen()})` })
    } finally {
      await handle.stop()
    }
  })

  test('recursive watch sees events in subdirectories', async () => {
    const dir = `${home}/watched-rec`
    await sbx.files.makeDir(`${dir}/inner`)
    const events = []
    const handle = await sbx.files.watchDir(dir, (e) => { events.push(e) }, { recursive: true })
    try {
      await sbx.commands.run(`echo x > ${dir}/inner/file.txt`)
      await eventually(() => events.some((e) => e.name === 'inner/file.txt'), { what: `event for inner/file.txt, got ${JSON.stringify(events)}` })
    } finally {
      await handle.stop()
    }
  })

  test('watching a missing directory fails with not found', async () => {
    const err = await rejection(sbx.files.watchDir(`${home}/no-such-dir`, () => {}))
    assert.ok(err instanceof NotFoundError, String(err))
  })
})

describe('signed URLs', () => {
  // With E2B_SANDBOX_URL set the URLs point at the cube-server; the sandbox
  // is picked the same way the SDK does it, by header.
  const route = () => ({ 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49983' })

  test('uploadUrl accepts a multipart upload without an access token', async () => {
    const url = await sbx.uploadUrl(`${home}/uploaded.txt`)
    assert.match(url, /signature=v1_/)
    const form = new FormData()
    form.append('file', new Blob(['uploaded through a signed URL']), 'uploaded.txt')
    const res = await fetch(url, { method: 'POST', body: form, headers: route() })
    assert.equal(res.status, 200, await res.clone().text())
    assert.equal(await sbx.files.read(`${home}/uploaded.txt`), 'uploaded through a signed URL')
  })

  test('downloadUrl serves the file without an access token', async () => {
    await sbx.files.write(`${home}/download.txt`, 'download me')
    const url = await sbx.downloadUrl(`${home}/download.txt`)
    const res = await fetch(url, { headers: route() })
    assert.equal(res.status, 200)
    assert.equal(await res.text(), 'download me')
  })

  test('a signed URL with an expiry works before it', async () => {
    await sbx.files.write(`${home}/expiring.txt`, 'still valid')
    const url = await sbx.downloadUrl(`${home}/expiring.txt`, { useSignatureExpiration: 3600 })
    assert.match(url, /signature_expiration=\d+/)
    const res = await fetch(url, { headers: route() })
    assert.equal(res.status, 200)
    assert.equal(await res.text(), 'still valid')
  })

  test('signed URLs work on their own, with no routing headers, as E2B\'s do', async () => {
    // Over HTTPS the URL's host names the sandbox; routed by header, the
    // server finds the sandbox whose token signed it.
    await sbx.files.write(`${home}/alone.txt`, 'no headers needed')
    const down = await fetch(await sbx.downloadUrl(`${home}/alone.txt`, { useSignatureExpiration: 600 }))
    assert.equal(down.status, 200)
    assert.equal(await down.text(), 'no headers needed')
    const form = new FormData()
    form.append('file', new Blob(['uploaded with no headers']), 'alone-up.txt')
    const up = await fetch(await sbx.uploadUrl(`${home}/alone-up.txt`), { method: 'POST', body: form })
    assert.equal(up.status, 200, await up.clone().text())
    assert.equal(await sbx.files.read(`${home}/alone-up.txt`), 'uploaded with no headers')
  })

  test('a signed URL past its expiry is refused with E2B\'s message', async () => {
    await sbx.files.write(`${home}/expired.txt`, 'too late')
    const url = new URL(await sbx.downloadUrl(`${home}/expired.txt`, { useSignatureExpiration: 1 }))
    const expires = Number(url.searchParams.get('signature_expiration'))
    assert.ok(expires > 0, url.href)
    while (Date.now() / 1000 <= expires + 1) await new Promise((r) => setTimeout(r, 200))
    const res = await fetch(url, { headers: route() })
    assert.ok(res.status === 401 || res.status === 403, `expired: ${res.status}`)
    const body = await res.text()
    assert.notEqual(body, 'too late')
    assert.match(body, /signature is already expired/)
  })

  test('a tampered signature or another path is refused', async () => {
    await sbx.files.write(`${home}/secret.txt`, 'secret')
    const url = new URL(await sbx.downloadUrl(`${home}/download.txt`))
    url.searchParams.set('path', `${home}/secret.txt`)
    const res = await fetch(url, { headers: route() })
    assert.ok(res.status === 401 || res.status === 403, `other path with the same signature: ${res.status}`)
    assert.notEqual(await res.text(), 'secret')

    const bad = new URL(await sbx.downloadUrl(`${home}/secret.txt`))
    bad.searchParams.set('signature', 'v1_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA')
    const res2 = await fetch(bad, { headers: route() })
    assert.ok(res2.status === 401 || res2.status === 403, `wrong signature: ${res2.status}`)

    // No signature and no token: refused too.
    const res3 = await fetch(`${new URL(url).origin}/files?path=${encodeURIComponent(`${home}/secret.txt`)}`, { headers: route() })
    assert.ok(res3.status === 401 || res3.status === 403, `unsigned: ${res3.status}`)
  })
})
