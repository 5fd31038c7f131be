// Templates: the list with aliases and tags, and a build form (from an
// image reference, or from an uploaded image archive, which the server
// stores in its import directory first).
import { get, post, call, enc } from '../api.js'
import { h, fill, errorBox, when, bytes, table, field } from '../ui.js'

export function render (root) {
  const list = h('div', { 'aria-live': 'polite' })
  fill(root, h('h1', {}, 'Templates'), buildForm(), h('h2', {}, 'All templates'), list)
  load(list)
}

async function load (list) {
  let templates
  try {
    templates = await get('/templates')
  } catch (err) {
    fill(list, errorBox(err))
    return
  }
  const tags = {}
  await Promise.all((templates || []).map(async (t) => {
    try {
      const res = await get(`/templates/${enc(t.templateID)}/tags`)
      tags[t.templateID] = (res || []).map((x) => x.tag || x.name || x).filter((x) => typeof x === 'string')
    } catch { tags[t.templateID] = [] }
  }))
  fill(list, table('Templates', ['Template', 'Aliases', 'Tags', 'Status', 'CPU', 'Memory', 'Size', 'Sandboxes started', 'Updated'],
    (templates || []).map((t) => [
      t.templateID,
      (t.aliases || []).join(', ') || '–',
      (tags[t.templateID] || []).join(', ') || '–',
      t.jobID && (t.status || t.buildStatus) !== 'ready'
        ? h('a', { href: `#/builds/${t.templateID}/${t.jobID}` }, h('span', { class: `badge ${t.status || t.buildStatus}` }, t.status || t.buildStatus))
        : h('span', { class: `badge ${t.status || t.buildStatus}` }, t.status || t.buildStatus),
      t.cpuCount, `${t.memoryMB} MiB`, t.sizeBytes ? bytes(t.sizeBytes) : '–', t.spawnCount ?? 0, when(t.updatedAt),
    ]), 'No template yet: build one above.'))
}

function buildForm () {
  const image = h('input', { name: 'image', placeholder: 'docker.io/library/python:3.12 or oci-archive:default-image.tar' })
  const archive = h('input', { name: 'archive', type: 'file', accept: '.tar,application/x-tar' })
  const kind = h('select', { name: 'kind' }, h('option', { value: 'oci-archive' }, 'OCI archive'), h('option', { value: 'docker-archive' }, 'docker save archive'))
  const templateID = h('input', { name: 'templateID', pattern: '[a-z0-9][a-z0-9_\\-]{0,62}', placeholder: 'generated when empty' })
  const aliases = h('input', { name: 'aliases', placeholder: 'comma-separated' })
  const cpu = h('input', { name: 'cpuMillicores', type: 'number', min: 1000, step: 1000, value: 1000 })
  const memory = h('input', { name: 'memoryMB', type: 'number', min: 128, step: 128, value: 1024 })
  const disk = h('input', { name: 'writableLayerSize', placeholder: '1G' })
  const probe = h('input', { name: 'probePort', type: 'number', min: 1, max: 65535, placeholder: '49983' })
  const status = h('div')
  const form = h('form', { class: 'create', 'aria-labelledby': 'build-title' },
    h('h2', { id: 'build-title' }, 'Build a template'),
    h('div', { class: 'row' },
      field('Image reference', image, 'a registry reference, or oci-archive:FILE in the server\'s import directory'),
      field('…or upload an image archive', archive), field('Archive kind', kind)),
    h('div', { class: 'row' }, field('Template ID', templateID), field('Aliases', aliases)),
    h('div', { class: 'row' }, field('CPU (millicores)', cpu), field('Memory (MiB)', memory), field('Writable layer size', disk), field('Probe port', probe)),
    h('button', { type: 'submit' }, 'Build'), status)
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault()
    try {
      let ref = image.value.trim()
      const file = archive.files && archive.files[0]
      if (file) {
        fill(status, h('p', { class: 'muted' }, `Uploading ${file.name} (${bytes(file.size)})…`))
        const up = await call('POST', `/templates/imports?kind=${enc(kind.value)}`, file, { raw: true, contentType: 'application/x-tar' })
        ref = up.body.image
      }
      if (!ref) throw new Error('give an image reference or choose an archive to upload')
      const body = { image: ref, cpuMillicores: Number(cpu.value) || undefined, memoryMB: Number(memory.value) || undefined }
      if (templateID.value.trim()) body.templateID = templateID.value.trim()
      const al = aliases.value.split(',').map((s) => s.trim()).filter(Boolean)
      if (al.length) body.aliases = al
      if (disk.value.trim()) body.writableLayerSize = disk.value.trim()
      if (probe.value) body.probePort = Number(probe.value)
      fill(status, h('p', { class: 'muted' }, 'Starting the build…'))
      const started = await post('/templates', body)
      location.hash = `#/builds/${started.templateID}/${started.jobID}`
    } catch (err) {
      fill(status, errorBox(err))
    }
  })
  return form
}
