// One sandbox: what the API says of it, its CPU and memory over time
// (GET /sandboxes/{id}/metrics, polled), its log as it grows
// (GET /v2/sandboxes/{id}/logs from the last entry seen), its network
// policy, and the lifecycle actions, each behind a confirmation.
import { get, post, del, call, enc } from '../api.js'
import { h, fill, errorBox, every, notify, confirmAction, facts, when, bytes, field } from '../ui.js'
import { TimeChart } from '../charts.js'

const POLL_MS = 2000
const MAX_LOG_LINES = 500

export function render (root, [id]) {
  const info = h('div')
  const network = h('div')
  const actions = h('div', { class: 'actions', role: 'group', 'aria-label': 'Sandbox actions' })
  const problem = h('div')
  const logList = h('ol', { class: 'log', 'aria-live': 'off' })
  const cpu = new TimeChart('CPU', [{ label: 'used' }], { format: (v) => `${v.toFixed(1)} %`, range: [0, 100] })
  const mem = new TimeChart('Memory', [{ label: 'used' }], { format: (v) => bytes(v) })
  fill(root,
    h('p', {}, h('a', { href: '#/sandboxes' }, '← Sandboxes')),
    h('h1', {}, 'Sandbox ', h('code', {}, id)),
    problem, actions, info,
    h('section', { class: 'charts', 'aria-label': 'Resource charts' }, cpu.el, mem.el),
    h('section', { 'aria-labelledby': 'net-title' }, h('h2', { id: 'net-title' }, 'Network policy'), network),
    h('section', { 'aria-labelledby': 'logs-title' }, h('h2', { id: 'logs-title' }, 'Logs'), logList))

  let detail
  let gone = false
  async function refresh () {
    try {
      detail = await get(`/sandboxes/${enc(id)}`)
    } catch (err) {
      if (err.status === 404) gone = true
      fill(problem, errorBox(err))
      fill(actions)
      return
    }
    fill(problem)
    fill(info, facts([
      ['State', h('span', { class: `badge ${detail.state}`, 'data-testid': 'state' }, detail.state)],
      ['Template', detail.alias ? `${detail.alias} (${detail.templateID})` : detail.templateID],
      ['Started', when(detail.startedAt)],
      ['Ends', when(detail.endAt)],
      ['CPUs', detail.cpuCount],
      ['Memory', `${detail.memoryMB} MiB`],
      ['Disk', `${detail.diskSizeMB} MiB`],
      ['envd', detail.envdVersion],
      ['Metadata', Object.entries(detail.metadata || {}).map(([k, v]) => `${k}=${v}`).join(', ') || '–'],
    ]))
    const n = detail.network || {}
    fill(network, facts([
      ['Internet access', detail.allowInternetAccess === false ? 'denied' : 'allowed'],
      ['Allowed out', (n.allowOut || []).join(', ') || '–'],
      ['Denied out', (n.denyOut || []).join(', ') || '–'],
      ['Public traffic', n.allowPublicTraffic === false ? 'needs the traffic token' : 'open'],
      ['Masked request host', n.maskRequestHost || '–'],
    ]))
    renderActions()
  }

  function act (label, run, { danger = false, extra, ask } = {}) {
    return h('button', {
      type: 'button',
      class: danger ? 'danger' : 'secondary',
      onclick: async () => {
        const input = extra ? extra() : undefined
        if (!await confirmAction(ask, { ok: label, extra: input && input.el, danger })) return
        try {
          await run(input && input.value())
          notify(`${label}: done`)
        } catch (err) {
          fill(problem, errorBox(err))
        }
        if (!gone) refresh()
      },
    }, label)
  }

  function renderActions () {
    const running = detail.state === 'running'
    fill(actions,
      running
        ? act('Pause', () => post(`/sandboxes/${enc(id)}/pause`), { ask: `Pause sandbox ${id}? Its processes stop until it is resumed.` })
        : act('Resume', () => post(`/sandboxes/${enc(id)}/resume`, {}), { ask: `Resume sandbox ${id}?` }),
      running && act('Snapshot', async (name) => {
        const snap = await post(`/sandboxes/${enc(id)}/snapshots`, name ? { name } : {})
        notify(`Snapshot ${snap.snapshotID} taken`)
      }, { ask: `Take a snapshot of sandbox ${id}?`, extra: () => textInput('Snapshot name (optional)', '') }),
      running && act('Clone', async () => {
        const out = await post(`/sandboxes/${enc(id)}/clone`, { count: 1 })
        const child = out && out[0] && out[0].sandbox
        if (child) location.hash = `#/sandboxes/${child.sandboxID}`
        else if (out && out[0] && out[0].error) throw new Error(out[0].error.message)
      }, { ask: `Clone sandbox ${id}? The copy runs as a new sandbox.` }),
      act('Set timeout', (secs) => call('POST', `/sandboxes/${enc(id)}/timeout`, { timeout: Number(secs) }), {
        ask: `Set how long sandbox ${id} lives from now.`,
        extra: () => textInput('Timeout (seconds from now)', '300', 'number'),
      }),
      act('Kill', async () => {
        // No poll asks for the sandbox once it is being killed.
        gone = true
        try {
          await del(`/sandboxes/${enc(id)}`)
        } catch (err) {
          gone = false
          throw err
        }
        location.hash = '#/sandboxes'
      }, { danger: true, ask: `Kill sandbox ${id}? It cannot be brought back.` }))
  }

  let logCursor = -1
  const stops = [
    every(POLL_MS, async () => {
      if (gone) return
      await refresh()
    }),
    every(POLL_MS, async () => {
      if (gone || !detail || detail.state !== 'running') return
      const samples = await get(`/sandboxes/${enc(id)}/metrics`)
      for (const m of samples || []) {
        cpu.push(m.timestampUnix, [m.cpuUsedPct])
        mem.push(m.timestampUnix, [m.memUsed])
      }
    }),
    every(POLL_MS, async () => {
      if (gone) return
      const q = logCursor >= 0 ? `?cursor=${logCursor + 1}` : ''
      const res = await get(`/v2/sandboxes/${enc(id)}/logs${q}`)
      for (const e of res.logs || []) {
        logCursor = Math.max(logCursor, Date.parse(e.timestamp))
        logList.append(h('li', { class: `lv-${e.level}` }, h('time', { datetime: e.timestamp }, new Date(e.timestamp).toLocaleTimeString()), ' ', e.level, ' ', e.message))
      }
      while (logList.children.length > MAX_LOG_LINES) logList.firstChild.remove()
      if (!logList.children.length) fill(logList, h('li', { class: 'muted' }, 'No log entries yet.'))
      else if (logList.firstChild.classList.contains('muted') && logList.children.length > 1) logList.firstChild.remove()
    }),
  ]
  return () => { stops.forEach((s) => s()); cpu.destroy(); mem.destroy() }
}

function textInput (label, value, type = 'text') {
  const input = h('input', { type, value })
  return { el: field(label, input), value: () => input.value.trim() }
}
