// Node: what this server is and holds (version, runtime, data directory,
// host); the service's nodes (GET /nodes, polled: this server alone with
// the embedded SQLite store, every cube-server sharing a PostgreSQL one)
// with drain and uncordon, each behind a confirmation; and the latest
// benchmark run, from docs/BENCHMARKS.md as bundled with the console.
import { get, post, enc } from '../api.js'
import { h, fill, errorBox, facts, bytes, table, when, every, notify, confirmAction } from '../ui.js'

const POLL_MS = 3000

export function render (root) {
  const about = h('div')
  const nodes = h('div')
  const problem = h('div')
  const bench = h('div')
  fill(root, h('h1', {}, 'Node'), about,
    h('section', { 'aria-labelledby': 'nodes-title' }, h('h2', { id: 'nodes-title' }, 'Nodes'), problem, nodes),
    h('section', { 'aria-labelledby': 'bench-title' }, h('h2', { id: 'bench-title' }, 'Latest benchmark'), bench))
  get('/console/api/summary').then((s) => {
    const d = s.dataDir
    const used = d.totalBytes - d.freeBytes
    fill(about, facts([
      ['Version', s.version || '–'],
      ['Runtime', s.runtime || '–'],
      ['Data directory', d.path || '–'],
      ['Data filesystem', d.totalBytes ? h('span', {}, `${bytes(used)} used of ${bytes(d.totalBytes)} (${bytes(d.freeBytes)} free) `, h('meter', { min: 0, max: d.totalBytes, value: used, 'aria-label': 'data filesystem used' })) : '–'],
      ['Host CPUs', s.host.cpus],
      ['Host memory', `${bytes(s.host.memTotalBytes - s.host.memAvailableBytes)} used of ${bytes(s.host.memTotalBytes)}`],
      ['Sandboxes', `${s.capacity.used} of ${s.capacity.max} allowed`],
    ]))
  }).catch((err) => fill(about, errorBox(err)))
  fetch('/console/assets/benchmarks.md').then((r) => r.ok ? r.text() : Promise.reject(new Error(`benchmarks: ${r.status}`)))
    .then((md) => fill(bench, renderBenchmarks(md)))
    .catch((err) => fill(bench, errorBox(err)))

  // The table is drawn again when a node or a status changes, else its
  // figures are updated in place, so that a focused button stays focused.
  // focus is the node whose button gets the focus after an action: the
  // dialog gives it back to the button pressed, which the new status
  // replaces.
  let drawn = null
  async function load (focus) {
    let list
    try {
      list = (await get('/nodes')) || []
    } catch (err) {
      fill(nodes, errorBox(err))
      drawn = null
      return
    }
    const ready = list.filter((n) => n.status === 'ready').length
    const rows = list.map((n) => {
      const m = n.metrics || {}
      const disk = (m.disks || [])[0]
      return [
        [h('code', {}, n.id), n.self ? h('span', { class: 'muted' }, ' (this node)') : null],
        h('span', { class: `badge ${n.status}`, 'data-testid': 'node-status' }, n.status),
        n.address || '–',
        n.version || '–',
        `${m.cpuPercent ?? 0} % of ${m.cpuCount ?? '–'} CPUs, ${m.allocatedCPU ?? 0} allocated`,
        `${bytes(m.memoryUsedBytes)} of ${bytes(m.memoryTotalBytes)}, ${bytes(m.allocatedMemoryBytes)} allocated`,
        disk && disk.totalBytes ? `${bytes(disk.usedBytes)} of ${bytes(disk.totalBytes)}` : '–',
        `${n.sandboxCount} running${n.sandboxStartingCount ? `, ${n.sandboxStartingCount} starting` : ''}`,
        when(n.heartbeatAt),
        h('span', { class: 'actions' }, actions(n, ready)),
      ]
    })
    const shape = list.map((n) => `${n.id} ${n.status}`).join()
    if (shape === drawn) {
      nodes.querySelectorAll('tbody tr').forEach((tr, i) => rows[i].slice(0, -1).forEach((cell, j) => fill(tr.children[j], cell)))
    } else {
      drawn = shape
      fill(nodes, table('Nodes of the service', ['Node', 'Status', 'Address', 'Version', 'CPU', 'Memory', 'Data disk', 'Sandboxes', 'Last heartbeat', 'Actions'],
        rows, 'No node has registered.', { stack: true }))
    }
    if (focus) nodes.querySelector(`button[data-node="${CSS.escape(focus)}"]`)?.focus()
  }

  function act (n, label, status, ask) {
    return h('button', {
      type: 'button',
      class: 'secondary',
      'data-node': n.id,
      'aria-label': `${label} node ${n.id}`,
      onclick: async () => {
        if (!await confirmAction(ask, { ok: label })) return
        try {
          await post(`/nodes/${enc(n.id)}`, { status })
          fill(problem)
          notify(`Node ${n.id} is ${status}`)
        } catch (err) {
          fill(problem, errorBox(err))
        }
        load(n.id)
      },
    }, label)
  }

  // Ready nodes can be drained; draining and standby ones made ready
  // again. An unhealthy node's status is whatever it was given before it
  // stopped heartbeating, so it is left alone until it is back.
  function actions (n, ready) {
    if (n.status === 'ready') {
      const last = ready === 1 ? ' It is the only ready node: no sandbox can be created until a node is ready again.' : ''
      return act(n, 'Drain', 'draining', `Drain node ${n.id}? It keeps running its sandboxes and takes no new ones.${last}`)
    }
    if (n.status === 'draining' || n.status === 'standby') {
      return act(n, 'Uncordon', 'ready', `Make node ${n.id} ready again? It takes new sandboxes.`)
    }
    return '–'
  }

  // A dialog's answer is awaited before the table is drawn again.
  const dialog = document.getElementById('confirm')
  return every(POLL_MS, () => dialog.open ? undefined : load())
}

/**
 * The generation line, the machine table and the first target tables of
 * BENCHMARKS.md, as elements (no markup from the file is ever parsed).
 */
export function renderBenchmarks (md, maxSections = 3) {
  const out = []
  let sections = 0
  let rows = null
  const flush = () => {
    if (!rows) return
    const [head, ...body] = rows
    out.push(h('div', { class: 'table-wrap' }, h('table', {},
      h('thead', {}, h('tr', {}, head.map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', {}, body.map((r) => h('tr', {}, r.map((c) => h('td', {}, c))))))))
    rows = null
  }
  for (const line of md.split('\n')) {
    if (line.startsWith('## ')) {
      flush()
      if (++sections > maxSections) break
      out.push(h('h3', {}, line.slice(3)))
    } else if (line.startsWith('|')) {
      const cells = line.split('|').slice(1, -1).map((c) => c.trim().replace(/`/g, ''))
      if (cells.every((c) => /^:?-+:?$/.test(c))) continue
      ;(rows = rows || []).push(cells)
    } else {
      flush()
      if (line.startsWith('Generated by')) out.push(h('p', { class: 'muted' }, line.replace(/`/g, '').split('. ')[0] + '.'))
    }
  }
  flush()
  return out
}
