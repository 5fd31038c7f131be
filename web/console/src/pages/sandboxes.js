// Sandboxes: the API's list (GET /v2/sandboxes) with its state and
// metadata filters and paging, a template filter on the page shown, and a
// form that creates one.
import { call, get, post, enc } from '../api.js'
import { h, fill, errorBox, notify, when, table, field } from '../ui.js'

const PAGE = 20

/** Parses "a=1, b=2" into {a: '1', b: '2'}; throws on a pair without '='. */
export function parseMetadata (text) {
  const out = {}
  for (const part of text.split(',').map((s) => s.trim()).filter(Boolean)) {
    const i = part.indexOf('=')
    if (i <= 0) throw new Error(`metadata "${part}": write key=value pairs separated by commas`)
    out[part.slice(0, i).trim()] = part.slice(i + 1).trim()
  }
  return out
}

export function render (root) {
  const state = h('select', { name: 'state' },
    h('option', { value: 'running,paused' }, 'running and paused'),
    h('option', { value: 'running' }, 'running'),
    h('option', { value: 'paused' }, 'paused'))
  const template = h('input', { name: 'template', placeholder: 'any' })
  const metadata = h('input', { name: 'metadata', placeholder: 'key=value, …' })
  const list = h('div', { 'aria-live': 'polite' })
  const pager = h('nav', { class: 'pager', 'aria-label': 'Pages' })
  const tokens = [''] // the token of each page seen, for going back
  let page = 0

  async function load () {
    let q = `state=${enc(state.value)}&limit=${PAGE}`
    try {
      const md = parseMetadata(metadata.value)
      const pairs = Object.entries(md).map(([k, v]) => `${enc(k)}=${enc(v)}`).join('&')
      if (pairs) q += `&metadata=${enc(pairs)}`
    } catch (err) {
      fill(list, errorBox(err))
      return
    }
    if (tokens[page]) q += `&nextToken=${enc(tokens[page])}`
    let res
    try {
      res = await call('GET', `/v2/sandboxes?${q}`)
    } catch (err) {
      fill(list, errorBox(err))
      return
    }
    const next = res.headers.get('x-next-token')
    tokens[page + 1] = next || undefined
    const tf = template.value.trim()
    const rows = (res.body || []).filter((s) => !tf || s.templateID === tf || s.alias === tf)
    fill(list, table(`Sandboxes, page ${page + 1}`, ['Sandbox', 'Template', 'State', 'Started', 'Ends', 'CPU', 'Memory', 'Metadata'],
      rows.map((s) => [
        h('a', { href: `#/sandboxes/${s.sandboxID}` }, s.sandboxID),
        s.alias ? `${s.alias} (${s.templateID})` : s.templateID,
        h('span', { class: `badge ${s.state}` }, s.state),
        when(s.startedAt), when(s.endAt), s.cpuCount, `${s.memoryMB} MiB`,
        Object.entries(s.metadata || {}).map(([k, v]) => `${k}=${v}`).join(', '),
      ]), 'No sandbox matches.'))
    fill(pager,
      h('button', { type: 'button', class: 'secondary', disabled: page === 0, onclick: () => { page--; load() } }, 'Previous page'),
      h('span', {}, `Page ${page + 1}`),
      h('button', { type: 'button', class: 'secondary', disabled: !next, onclick: () => { page++; load() } }, 'Next page'))
  }

  const filters = h('form', { class: 'filters', 'aria-label': 'Filter sandboxes' },
    field('State', state), field('Template', template), field('Metadata', metadata, 'all pairs must match'),
    h('button', { type: 'submit' }, 'Apply'))
  filters.addEventListener('submit', (ev) => { ev.preventDefault(); tokens.length = 1; page = 0; load() })
  state.addEventListener('change', () => { tokens.length = 1; page = 0; load() })

  fill(root, h('h1', {}, 'Sandboxes'), createForm(), filters, list, pager)
  load()
}

function createForm () {
  const tpl = h('select', { name: 'templateID', required: true })
  const timeout = h('input', { name: 'timeout', type: 'number', min: 1, value: 300, required: true })
  const metadata = h('input', { name: 'metadata', placeholder: 'key=value, …' })
  const status = h('div')
  get('/templates').then((list) => {
    const ready = (list || []).filter((t) => (t.status || t.buildStatus) !== 'failed' && (t.status || 'ready') === 'ready')
    fill(tpl, ready.map((t) => h('option', { value: t.templateID }, t.aliases && t.aliases.length ? `${t.aliases[0]} (${t.templateID})` : t.templateID)))
  }).catch((err) => fill(status, errorBox(err)))
  const form = h('form', { class: 'create', 'aria-labelledby': 'create-title' },
    h('h2', { id: 'create-title' }, 'New sandbox'),
    h('div', { class: 'row' }, field('Template', tpl), field('Timeout (seconds)', timeout), field('Metadata', metadata)),
    h('button', { type: 'submit' }, 'Create sandbox'), status)
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault()
    fill(status, h('p', { class: 'muted' }, 'Creating…'))
    try {
      const body = { templateID: tpl.value, timeout: Number(timeout.value), metadata: parseMetadata(metadata.value) }
      const sbx = await post('/sandboxes', body)
      notify(`Created sandbox ${sbx.sandboxID}`)
      location.hash = `#/sandboxes/${sbx.sandboxID}`
    } catch (err) {
      fill(status, errorBox(err))
    }
  })
  return form
}
