// Overview: what the node holds now and how it has done over the last
// minutes, from the summary route polled every two seconds.
import { get } from '../api.js'
import { h, fill, every, stat, errorBox, ms, bytes, table } from '../ui.js'
import { TimeChart, windowQuantile } from '../charts.js'

const POLL_MS = 2000

export function render (root) {
  const stats = h('div', { class: 'stats', 'aria-live': 'polite' })
  const problem = h('div')
  const charts = {
    sandboxes: new TimeChart('Sandboxes', [{ label: 'running' }, { label: 'paused' }, { label: 'warm' }], { format: (v) => v.toFixed(0), whole: true }),
    creates: new TimeChart('Creates per minute', [{ label: 'ok' }, { label: 'errors' }], { format: (v) => v.toFixed(1) }),
    latency: new TimeChart('Create latency', [{ label: 'p50' }, { label: 'p95' }, { label: 'p99' }], { format: (v) => ms(v) }),
    cpu: new TimeChart('Host CPU', [{ label: 'busy' }], { format: (v) => `${v.toFixed(0)} %`, range: [0, 100] }),
    mem: new TimeChart('Host memory', [{ label: 'used' }], { format: (v) => bytes(v) }),
  }
  const pools = h('div')
  const ops = h('div')
  fill(root,
    h('h1', {}, 'Overview'),
    problem, stats,
    h('section', { class: 'charts', 'aria-label': 'Charts' }, Object.values(charts).map((c) => c.el)),
    h('section', { 'aria-labelledby': 'pools-title' }, h('h2', { id: 'pools-title' }, 'Warm pools'), pools),
    h('section', { 'aria-labelledby': 'ops-title' }, h('h2', { id: 'ops-title' }, 'Operation latency since start'), ops))

  let prev
  const stop = every(POLL_MS, async () => {
    let s
    try {
      s = await get('/console/api/summary')
      fill(problem)
    } catch (err) {
      fill(problem, errorBox(err))
      return
    }
    const warm = s.warmPools.reduce((n, p) => n + p.ready, 0)
    const cap = s.capacity
    fill(stats,
      stat('Running', s.sandboxes.running ?? 0),
      stat('Paused', s.sandboxes.paused ?? 0),
      stat('Warm pool', warm, `${s.warmPools.reduce((n, p) => n + p.misses, 0)} misses`),
      stat('Capacity used', `${cap.used} / ${cap.max}`, h('meter', { min: 0, max: cap.max || 1, value: cap.used, 'aria-label': 'capacity used' })),
      stat('Creates', s.creates.ok + s.creates.error, `${s.creates.error} failed`))
    const t = s.time / 1000
    charts.sandboxes.push(t, [s.sandboxes.running ?? 0, s.sandboxes.paused ?? 0, warm])
    if (prev) {
      const minutes = (s.time - prev.time) / 60000
      charts.creates.push(t, [(s.creates.ok - prev.creates.ok) / minutes, (s.creates.error - prev.creates.error) / minutes])
      charts.latency.push(t, [0.5, 0.95, 0.99].map((q) => windowQuantile(prev.createLatency, s.createLatency, q)))
      const total = s.host.cpuTotalSeconds - prev.host.cpuTotalSeconds
      charts.cpu.push(t, [total > 0 ? 100 * (s.host.cpuBusySeconds - prev.host.cpuBusySeconds) / total : null])
    }
    charts.mem.push(t, [s.host.memTotalBytes - s.host.memAvailableBytes])
    prev = s
    fill(pools, table('Warm sandboxes by template', ['Template', 'Ready', 'Target', 'Misses'],
      s.warmPools.map((p) => [p.template, p.ready, p.target, p.misses]), 'No warm pool yet: one fills once a template is used.'))
    const rows = [['create', s.createLatency], ...Object.entries(s.operations).sort(), ...Object.entries(s.builds).map(([k, v]) => [`build (${k})`, v])]
    fill(ops, table('Latency by operation', ['Operation', 'Count', 'p50', 'p95', 'p99'],
      rows.filter(([, v]) => v.count > 0).map(([k, v]) => [k, v.count, ms(v.p50), ms(v.p95), ms(v.p99)]), 'No operation yet.'))
  })
  return () => { stop(); Object.values(charts).forEach((c) => c.destroy()) }
}
