// Persistent volumes: E2B's Volume API (create, list, get, destroy and the
// content methods, which go to /volumecontent with the volume's own token)
// and volumeMounts on Sandbox.create, against real ext4 volumes bound into
// gVisor sandboxes.
import { describe, test, after, before } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, Volume, VolumeNotFoundError, VolumePathNotFoundError } from 'e2b'
import { Tracker, api, apiUrl, mode, rejection, runTag } from './helpers.mjs'

// Over plain HTTP the SDK needs to be told where content requests go (its
// default is https://api.<domain>, which is where they go over HTTPS).
if (mode === 'header') process.env.E2B_VOLUME_API_URL = apiUrl

const tracker = new Tracker()
const volumes = new Set()
const snapshots = new Set()
after(async () => {
  await tracker.killAll(Sandbox)
  for (const id of snapshots) await Sandbox.deleteSnapshot(id).catch(() => {})
  for (const id of volumes) await Volume.destroy(id).catch(() => {})
})

async function newVolume(suffix, body = {}) {
  const name = `v-${runTag}-${suffix}`
  const res = await api('POST', '/volumes', { name, ...body })
  assert.equal(res.status, 201, res.text)
  volumes.add(res.json.volumeID)
  return new Volume(res.json.volumeID, res.json.name, res.json.token)
}

async function withMounts(mounts) {
  return tracker.add(await Sandbox.create({ volumeMounts: mounts }))
}

async function run(sbx, cmd, opts = {}) {
  return sbx.commands.run(cmd, opts)
}

// What a failing command said, whatever the SDK threw.
async function failure(promise) {
  const err = await rejection(promise)
  return `${err.stdout ?? ''}${err.stderr ?? ''}${err.message}`
}

describe('volume API', () => {
  test('create, list, get, duplicate and invalid names, destroy', async () => {
    const name = `crud-${runTag}`
    const vol = await Volume.create(name)
    volumes.add(vol.volumeId)
    assert.equal(vol.name, name)
    assert.ok(vol.token, 'a content token')

    const listed = await Volume.list()
    assert.ok(listed.some((v) => v.volumeId === vol.volumeId && v.name === name), 'listed')
    const info = await Volume.getInfo(vol.volumeId)
    assert.equal(info.name, name)
    assert.equal(info.token, vol.token)
    const raw = await api('GET', `/volumes/${vol.volumeId}`)
    assert.equal(raw.json.sizeMB, 1024, 'the default size')

    const dup = await api('POST', '/volumes', { name })
    assert.equal(dup.status, 400)
    assert.match(dup.json.message, /already exists/)
    for (const bad of ['', 'has space', 'a/b', '..', 'x'.repeat(64)]) {
      const res = await api('POST', '/volumes', { name: bad })
      assert.equal(res.status, 400, `name ${JSON.stringify(bad)}`)
      assert.equal(res.json.code, 400)
      assert.match(res.json.message, /name/)
    }
    const big = await api('POST', '/volumes', { name: `big-${runTag}`, sizeMB: 1 << 30 })
    assert.equal(big.status, 400)
    assert.match(big.json.message, /sizeMB/)

    assert.equal(await Volume.destroy(vol.volumeId), true)
    volumes.delete(vol.volumeId)
    assert.ok(!(await Volume.list()).some((v) => v.volumeId === vol.volumeId), 'gone from the list')
    assert.ok((await rejection(Volume.getInfo(vol.volumeId))) instanceof VolumeNotFoundError)
    assert.equal((await api('DELETE', `/volumes/${vol.volumeId}`)).status, 404)
  })

  test('content: write, read, list, makeDir, getInfo, updateMetadata, remove', async () => {
    const vol = await newVolume('content')
    const written = await vol.writeFile('/notes/a.txt', 'hello volume', { force: true })
    assert.equal(written.type, 'file')
    assert.equal(written.size, 12)
    assert.equal(written.uid, 1000)
    assert.equal(await vol.readFile('/notes/a.txt'), 'hello volume')
    const bytes = await vol.readFile('notes/a.txt', { format: 'bytes' })
    assert.equal(Buffer.from(bytes).toString(), 'hello volume')

    // Without force an existing file is kept: 409.
    const again = await rejection(vol.writeFile('/notes/a.txt', 'other'))
    assert.match(again.message, /exists already/)
    assert.equal(await vol.readFile('/notes/a.txt'), 'hello volume')

    const dir = await vol.makeDir('/notes/sub/deeper', { force: true, mode: 0o700 })
    assert.equal(dir.type, 'directory')
    assert.equal(dir.mode, 0o700)
    const top = await vol.list('/')
    assert.deepEqual(top.map((e) => e.name), ['notes'])
    const deep = await vol.list('/notes', { depth: 3 })
    assert.deepEqual(deep.map((e) => e.path).sort(), ['/notes/a.txt', '/notes/sub', '/notes/sub/deeper'])

    const meta = await vol.updateMetadata('/notes/a.txt', { mode: 0o600, uid: 1234 })
    assert.equal(meta.mode, 0o600)
    assert.equal(meta.uid, 1234)
    assert.equal((await vol.getInfo('/notes/a.txt')).mtime instanceof Date, true)
    assert.equal(await vol.exists('/notes/a.txt'), true)
    assert.equal(await vol.exists('/nope'), false)
    assert.ok((await rejection(vol.readFile('/nope'))) instanceof VolumePathNotFoundError)

    await vol.remove('/notes/sub')
    assert.equal(await vol.exists('/notes/sub/deeper'), false)
    const root = await rejection(vol.remove('/'))
    assert.match(root.message, /root/)
  })

  test('content routes take only the volume\'s own token, and no path leaves the volume', async () => {
    const a = await newVolume('tok-a')
    const b = await newVolume('tok-b')
    await a.writeFile('/x', 'x')
    const wrong = new Volume(a.volumeId, a.name, b.token)
    const err = await rejection(wrong.readFile('/x'))
    assert.match(err.message, /401|API key|nauthori/i)
    const none = await fetch(`${apiUrl}/volumecontent/${a.volumeId}/file?path=/x`)
    assert.equal(none.status, 401)

    for (const p of ['../../../../etc/passwd', '/../etc/passwd', 'a/../../etc/passwd']) {
      const res = await fetch(`${apiUrl}/volumecontent/${a.volumeId}/file?path=${encodeURIComponent(p)}`, {
        headers: { Authorization: `Bearer ${a.token}` },
      })
      const body = await res.json()
      assert.equal(res.status, 400, `${p}: ${JSON.stringify(body)}`)
      assert.equal(body.code, 400)
      assert.match(body.message, /leaves the volume/)
    }
  })
})

describe('volumes in sandboxes', () => {
  let shared
  before(async () => { shared = await newVolume('shared') })

  test('a volume outlives its sandbox; a second one and the API read what the first wrote', async () => {
    const first = await withMounts({ '/mnt/data': shared })
    const info = await Sandbox.getInfo(first.sandboxId)
    assert.deepEqual(info.volumeMounts, [{ name: shared.name, path: '/mnt/data' }])

    await run(first, 'mkdir -p /mnt/data/work && echo from-first > /mnt/data/work/out.txt && sync')
    // fsync on close behaves as on any filesystem.
    await run(first, `python3 -c "import os; f=open('/mnt/data/work/synced','w'); f.write('s'); f.flush(); os.fsync(f.fileno()); f.close()"`)
    const owner = await run(first, 'stat -c %u:%g /mnt/data /mnt/data/work/out.txt')
    assert.equal(owner.stdout.trim(), '1000:1000\n1000:1000')
    await first.kill()

    assert.equal(await shared.readFile('/work/out.txt'), 'from-first\n')
    assert.equal(await shared.readFile('/work/synced'), 's')

    const [second, third] = await Promise.all([withMounts({ '/mnt/data': shared }), withMounts({ '/data': shared })])
    assert.equal((await run(second, 'cat /mnt/data/work/out.txt')).stdout, 'from-first\n')
    // Two sandboxes at once see each other's writes, and the API's.
    await run(second, 'echo from-second > /mnt/data/work/second.txt')
    assert.equal((await run(third, 'cat /data/work/second.txt')).stdout, 'from-second\n')
    await run(third, 'echo from-third >> /data/work/second.txt')
    assert.equal((await run(second, 'cat /mnt/data/work/second.txt')).stdout, 'from-second\nfrom-third\n')
    await shared.writeFile('/work/api.txt', 'from-api')
    assert.equal((await run(second, 'cat /mnt/data/work/api.txt')).stdout, 'from-api')

    // Deleting a mounted volume is refused, naming the sandboxes.
    const busy = await api('DELETE', `/volumes/${shared.volumeId}`)
    assert.equal(busy.status, 409)
    assert.equal(busy.json.code, 409)
    assert.match(busy.json.message, new RegExp(second.sandboxId))
    assert.match(busy.json.message, new RegExp(third.sandboxId))
    await third.kill()
    await second.kill()
  })

  test('symlinks made inside a sandbox lead nowhere outside the volume', async () => {
    const sbx = await withMounts({ '/mnt/data': shared })
    await run(sbx, 'ln -sfn /etc/passwd /mnt/data/passwd-link && ln -sfn / /mnt/data/root-link && ln -sfn ../../../../../etc /mnt/data/up-link')
    // Inside, gVisor resolves them in the sandbox's own tree.
    assert.match((await run(sbx, 'cat /mnt/data/passwd-link')).stdout, /^root:/)
    const parent = (await run(sbx, 'ls /mnt/data/..')).stdout
    assert.match(parent, /data/)
    // Through the API they are not followed out of the volume.
    for (const p of ['/passwd-link', '/root-link/etc/passwd', '/up-link/passwd']) {
      const err = await rejection(shared.readFile(p))
      assert.match(err.message, /outside the volume|not a regular file|symlink/, `${p}: ${err.message}`)
    }
    const link = await shared.getInfo('/passwd-link')
    assert.equal(link.type, 'symlink')
    assert.equal(link.target, '/etc/passwd')
    const listed = await shared.list('/root-link').catch((e) => e)
    assert.ok(listed instanceof Error, 'a symlink to / is not listed as the host root')
    await shared.remove('/root-link')
    assert.equal((await run(sbx, 'test -d /etc && echo ok')).stdout.trim(), 'ok', 'removing a link never removes its target')
    await sbx.kill()
  })

  test('a full volume is ENOSPC inside and 507 through the API', async () => {
    const small = await newVolume('small', { sizeMB: 16 })
    const sbx = await withMounts({ '/mnt/small': small })
    const msg = await failure(run(sbx, 'dd if=/dev/zero of=/mnt/small/fill bs=1M count=64 conv=fsync'))
    assert.match(msg, /No space left on device/)
    const df = await run(sbx, 'df -k /mnt/small | tail -1')
    const totalKB = Number(df.stdout.trim().split(/\s+/)[1])
    assert.ok(totalKB > 8 * 1024 && totalKB <= 16 * 1024, `the volume's own size, not the host's: ${df.stdout}`)
    const res = await fetch(`${apiUrl}/volumecontent/${small.volumeId}/file?path=/more`, {
      method: 'PUT', headers: { Authorization: `Bearer ${small.token}`, 'Content-Type': 'application/octet-stream' },
      body: Buffer.alloc(4 << 20),
    })
    const body = await res.json()
    assert.equal(res.status, 507, JSON.stringify(body))
    assert.match(body.message, /volume is full/)
    await run(sbx, 'rm /mnt/small/fill')
    assert.equal((await run(sbx, 'echo ok > /mnt/small/after && cat /mnt/small/after')).stdout, 'ok\n')
    await sbx.kill()
  })

  test('pause and resume, snapshot and create-from-snapshot keep the mount', async () => {
    const vol = await newVolume('lifecycle')
    const sbx = await withMounts({ '/mnt/keep': vol })
    await run(sbx, 'echo before > /mnt/keep/f')
    assert.equal(await sbx.pause(), true)
    await vol.writeFile('/while-paused', 'p')
    const resumed = await Sandbox.connect(sbx.sandboxId)
    assert.equal((await run(resumed, 'cat /mnt/keep/f /mnt/keep/while-paused')).stdout, 'before\np')
    await run(resumed, 'echo after-resume > /mnt/keep/g')
    assert.equal(await vol.readFile('/g'), 'after-resume\n')

    const snap = await resumed.createSnapshot()
    snapshots.add(snap.snapshotId)
    const child = tracker.add(await Sandbox.create(snap.snapshotId))
    assert.deepEqual((await Sandbox.getInfo(child.sandboxId)).volumeMounts, [{ name: vol.name, path: '/mnt/keep' }])
    await run(child, 'echo from-child > /mnt/keep/child')
    assert.equal((await run(resumed, 'cat /mnt/keep/child')).stdout, 'from-child\n', 'the same volume, not a copy')
    // A snapshot keeps its mounts: others are refused.
    const other = await newVolume('other')
    const refused = await rejection(Sandbox.create(snap.snapshotId, { volumeMounts: { '/mnt/else': other } }))
    assert.match(refused.message, /keeps the volume mounts/)

    await child.kill()
    await resumed.kill()
    const held = await api('DELETE', `/volumes/${vol.volumeId}`)
    assert.equal(held.status, 409, 'a snapshot still mounts it')
    assert.match(held.json.message, new RegExp(snap.snapshotId))
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true)
    snapshots.delete(snap.snapshotId)
    assert.equal((await api('DELETE', `/volumes/${vol.volumeId}`)).status, 204)
    volumes.delete(vol.volumeId)
  })

  test('read-only mounts, bad mounts and unknown volumes are refused', async () => {
    const ro = await api('POST', '/v2/sandboxes', {
      templateID: 'base', timeout: 60, volumeMounts: [{ name: shared.name, path: '/mnt/ro', readOnly: true }],
    })
    assert.equal(ro.status, 201, ro.text)
    const sbx = tracker.add(await Sandbox.connect(ro.json.sandboxID))
    assert.match(await failure(run(sbx, 'touch /mnt/ro/x')), /Read-only file system/)
    await sbx.kill()

    const cases = [
      [[{ name: shared.name, path: 'relative' }], /not absolute/],
      [[{ name: shared.name, path: '/mnt/a/../b' }], /not clean/],
      [[{ name: shared.name, path: '/' }], /would hide/],
      [[{ name: shared.name, path: '/proc/x' }], /inside \/proc/],
      [[{ name: shared.name, path: '/.cube' }], /would hide/],
      [[{ name: shared.name, path: '/mnt/a' }, { name: 'other', path: '/mnt/a/b' }], /overlap/],
      [[{ name: `no-such-${runTag}`, path: '/mnt/x' }], new RegExp(`no-such-${runTag}.*does not exist`)],
    ]
    for (const [mounts, want] of cases) {
      const res = await api('POST', '/v2/sandboxes', { templateID: 'base', volumeMounts: mounts })
      assert.equal(res.status, 400, `${JSON.stringify(mounts)}: ${res.text}`)
      assert.equal(res.json.code, 400)
      assert.match(res.json.message, /volumeMounts/)
      assert.match(res.json.message, want)
    }
  })
})
