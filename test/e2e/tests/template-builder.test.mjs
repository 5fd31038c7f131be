// E2B's template builder, unchanged, against Cube: Template().fromTemplate()
// with runCmd, copy, setEnvs, setWorkdir and a start command awaited with
// waitForPort, built in gVisor by the server; rebuilds take unchanged steps
// from the cache; status, logs, tags and deletion read back. Nothing here
// needs the internet: the base is the default template.
import { describe, test, after, before } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { Sandbox, Template, BuildError, waitForPort } from 'e2b'
import { Tracker, api, runTag } from './helpers.mjs'

const tracker = new Tracker()
after(() => tracker.killAll(Sandbox))

const name = `built-${runTag}`
let context

before(() => {
  context = fs.mkdtempSync(path.join(os.tmpdir(), 'cube-template-'))
  fs.mkdirSync(path.join(context, 'files', 'sub'), { recursive: true })
  fs.writeFileSync(path.join(context, 'files', 'hello.txt'), 'hello from the client\n')
  fs.writeFileSync(path.join(context, 'files', 'sub', 'nested.txt'), 'nested\n')
})
after(() => fs.rmSync(context, { recursive: true, force: true }))

// The template of the suite; last is its last command, the step a rebuild
// changes.
function template(last) {
  return Template({ fileContextPath: context })
    .fromTemplate('base')
    .runCmd('echo from-run > /home/user/run-marker', { user: 'root' })
    .copy('files', '/home/user/app/')
    .setEnvs({ GREETING: 'hello from setEnvs' })
    .setWorkdir('/home/user/app')
    .runCmd(last)
    .setStartCmd('python3 -m http.server 8000', waitForPort(8000))
}

async function build(tpl, buildName = name) {
  const lines = []
  const text = () => lines.map((e) => `${e.level} ${e.message}`).join('\n')
  try {
    const info = await Template.build(tpl, buildName, { onBuildLogs: (e) => lines.push(e) })
    return { info, logs: text() }
  } catch (err) {
    err.buildLog = text()
    if (!buildName.endsWith('-fails')) console.error(`build ${buildName} failed: ${err.message}\nbuild log:\n${err.buildLog}`)
    throw err
  }
}

async function run(sbx, cmd) {
  const r = await sbx.commands.run(cmd)
  return r.stdout
}

describe('template builder', () => {
  let first

  test('Template.build builds in gVisor, and a sandbox of the template has every step\'s effect', async () => {
    assert.equal(await Template.exists(name), false)
    first = await build(template('echo "$GREETING" > greeting.txt'))
    assert.ok(first.info.templateId && first.info.buildId, JSON.stringify(first.info))
    assert.match(first.logs, /RUN echo from-run/)
    assert.match(first.logs, /Snapshotting/)
    assert.equal(await Template.exists(name), true)

    const sbx = tracker.add(await Sandbox.create(name))
    assert.equal(await run(sbx, 'cat /home/user/run-marker'), 'from-run\n')
    assert.equal(await sbx.files.read('/home/user/app/hello.txt'), 'hello from the client\n')
    assert.equal(await sbx.files.read('/home/user/app/sub/nested.txt'), 'nested\n')
    assert.equal(await sbx.files.read('/home/user/app/greeting.txt'), 'hello from setEnvs\n')
    assert.equal(await run(sbx, 'echo "$GREETING"'), 'hello from setEnvs\n')
    assert.equal(await run(sbx, 'pwd'), '/home/user/app\n')
    assert.equal(await run(sbx, 'whoami'), 'user\n')
    assert.equal(await run(sbx, 'stat -c %U /home/user/app/hello.txt'), 'user\n')
    // The start command was running when the snapshot was taken.
    assert.equal(await run(sbx, 'curl -s -o /dev/null -w "%{http_code}" http://127.0.0.1:8000/'), '200')
    await sbx.kill()
  })

  test('a rebuild with one changed step takes the steps before it from the cache', async () => {
    const second = await build(template('echo changed > greeting.txt'))
    assert.equal(second.info.templateId, first.info.templateId, 'a rebuild keeps the template')
    assert.notEqual(second.info.buildId, first.info.buildId)
    for (const step of ['CACHED [1/5] RUN', 'CACHED [2/5] COPY files', 'CACHED [3/5] ENV', 'CACHED [4/5] WORKDIR']) {
      assert.ok(second.logs.includes(step), `the rebuild log lacks "${step}":\n${second.logs}`)
    }
    assert.ok(!second.logs.includes('CACHED [5/5]'), `the changed step came from the cache:\n${second.logs}`)
    // Built again the moment the last one is ready: every step is cached.
    const third = await build(template('echo changed > greeting.txt'))
    assert.ok(third.logs.includes('CACHED [5/5] RUN'), third.logs)

    const sbx = tracker.add(await Sandbox.create(name))
    assert.equal(await sbx.files.read('/home/user/app/greeting.txt'), 'changed\n')
    await sbx.kill()

    const status = await Template.getBuildStatus({ templateId: second.info.templateId, buildId: second.info.buildId })
    assert.equal(status.status, 'ready')
    assert.ok(status.logEntries.some((e) => e.message.includes('CACHED [1/5] RUN')))
    const logs = await api('GET', `/templates/${second.info.templateId}/builds/${second.info.buildId}/logs?limit=1000`)
    assert.equal(logs.status, 200, logs.text)
    assert.ok(logs.json.logs.length >= status.logEntries.length)
  })

  test('tags name the current build', async () => {
    const tagged = await Template.assignTags(name, ['stable'])
    assert.deepEqual(tagged.tags, ['stable'])
    const tags = await Template.getTags(name)
    assert.ok(tags.some((t) => t.tag === 'stable' && t.buildId === tagged.buildId), JSON.stringify(tags))
    const sbx = tracker.add(await Sandbox.create(`${name}:stable`))
    assert.equal(await sbx.files.read('/home/user/app/greeting.txt'), 'changed\n')
    await sbx.kill()
    await Template.removeTags(name, 'stable')
    assert.ok(!(await Template.getTags(name)).some((t) => t.tag === 'stable'))
  })

  test('a failing step fails the build with its exit code and output', async () => {
    const failing = Template({ fileContextPath: context }).fromTemplate('base').runCmd('echo going down >&2; exit 7')
    await assert.rejects(build(failing, `${name}-fails`), (err) => {
      assert.ok(err instanceof BuildError, String(err))
      assert.match(err.message, /exited with code 7/)
      assert.match(err.buildLog, /going down/, 'the log has the step\'s output')
      return true
    })
  })

  test('a deleted template no longer exists', async () => {
    const del = await api('DELETE', `/templates/${first.info.templateId}`)
    assert.equal(del.status, 204, del.text)
    assert.equal(await Template.exists(name), false)
  })
})

describe('README', () => {
  test('the "Custom templates" snippet runs as written', async () => {
    const readme = fs.readFileSync(new URL('../../../README.md', import.meta.url), 'utf8')
    const section = readme.split('## Custom templates')[1]
    const snippet = section && section.split('```js\n')[1]?.split('```')[0]
    assert.ok(snippet, 'README.md has a js snippet under "Custom templates"')
    // Inside test/e2e, so that `import 'e2b'` finds the pinned SDK.
    const dir = fs.mkdtempSync(new URL('../.readme-', import.meta.url).pathname)
    try {
      const file = path.join(dir, 'snippet.mjs')
      fs.writeFileSync(file, snippet)
      const { execFileSync } = await import('node:child_process')
      const out = execFileSync(process.execPath, [file], { cwd: dir, env: process.env, encoding: 'utf8', timeout: 240_000 })
      assert.match(out, /hello from app\.py\ndemo\n/, out)
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
      await api('DELETE', '/templates/my-app')
    }
  })
})

describe('fromDockerfile', () => {
  test('a Dockerfile on a local image archive builds, its RUN, ENV and WORKDIR applied', async () => {
    const dfName = `${name}-dockerfile`
    const tpl = Template({ fileContextPath: context }).fromDockerfile([
      'FROM oci-archive:default-image.tar',
      'ENV FROM_DOCKERFILE=yes',
      'RUN echo "built by $(whoami)" > /opt/who.txt',
      'COPY files/hello.txt /opt/hello.txt',
      'WORKDIR /opt',
    ].join('\n'))
    await build(tpl, dfName)
    const sbx = tracker.add(await Sandbox.create(dfName))
    assert.equal(await sbx.files.read('/opt/who.txt'), 'built by root\n')
    assert.equal(await sbx.files.read('/opt/hello.txt'), 'hello from the client\n')
    assert.equal(await run(sbx, 'echo $FROM_DOCKERFILE; pwd; whoami'), 'yes\n/opt\nuser\n')
    await sbx.kill()
    assert.equal((await api('DELETE', `/templates/${dfName}`)).status, 204)
  })
})
