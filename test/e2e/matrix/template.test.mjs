// The matrix's template build, through the release CUBE_E2E_SDK names
// (sdk.mjs): a template from the default one with a command and an
// environment variable, built by the server, then a sandbox of it. The
// variable names the release, so no release's build comes from another's
// cache.
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, Template, can, unless, label, version } from './sdk.mjs'
import { Tracker, api, runTag } from '../tests/helpers.mjs'

const tracker = new Tracker()
after(() => tracker.killAll(Sandbox))

test('Template.build, then create from the template', { skip: unless(can.template, 'Template') }, async () => {
  const name = `matrix-${version.replaceAll('.', '-')}-${runTag}`
  const tpl = Template()
    .fromTemplate('base')
    .setEnvs({ MATRIX_GREETING: `built by ${label}` })
    .runCmd('echo "$MATRIX_GREETING" > /home/user/built.txt')
  const logs = []
  try {
    const info = await Template.build(tpl, name, { onBuildLogs: (e) => logs.push(e.message) })
    assert.ok(info.templateId, JSON.stringify(info))
    const sbx = tracker.add(await Sandbox.create(name))
    assert.equal(await sbx.files.read('/home/user/built.txt'), `built by ${label}\n`)
    assert.equal((await sbx.commands.run('echo "$MATRIX_GREETING"')).stdout, `built by ${label}\n`)
    assert.doesNotMatch(logs.join('\n'), /CACHED/, 'every step ran for this release')
    await sbx.kill()
  } catch (err) {
    err.message += `\nbuild log:\n${logs.join('\n')}`
    throw err
  } finally {
    await api('DELETE', `/templates/${name}`)
  }
})
