// A template build as it runs: its phase and progress (GET
// /templates/jobs/{jobID}) and its log (the build status route, from the
// last line seen), until it is READY or FAILED.
import { get, enc } from '../api.js'
import { h, fill, errorBox, every } from '../ui.js'

const POLL_MS = 1000

export function render (root, [templateID, jobID]) {
  const phase = h('strong', { 'data-testid': 'phase' }, '…')
  const progress = h('progress', { max: 100, value: 0, 'aria-label': 'build progress' })
  const pct = h('span', {}, '')
  const problem = h('div')
  const logList = h('ol', { class: 'log' })
  fill(root,
    h('p', {}, h('a', { href: '#/templates' }, '← Templates')),
    h('h1', {}, 'Build of ', h('code', {}, templateID)),
    h('p', { class: 'muted' }, `job ${jobID}`),
    h('div', { class: 'build-status', role: 'status', 'aria-live': 'polite' }, 'Phase: ', phase, ' ', progress, ' ', pct),
    problem,
    h('h2', {}, 'Build log'), logList)
  let offset = 0
  let done = false
  const stop = every(POLL_MS, async () => {
    if (done) return
    let job
    try {
      job = await get(`/templates/jobs/${enc(jobID)}`)
    } catch (err) {
      fill(problem, errorBox(err))
      return
    }
    phase.textContent = job.phase
    phase.className = `badge ${job.phase.toLowerCase()}`
    progress.value = job.progress
    pct.textContent = `${job.progress} %`
    if (job.error) fill(problem, errorBox(new Error(job.error)))
    try {
      const st = await get(`/templates/${enc(templateID)}/builds/${enc(jobID)}/status?logsOffset=${offset}`)
      for (const e of st.logEntries || []) {
        logList.append(h('li', { class: `lv-${e.level}` }, h('time', { datetime: e.timestamp }, new Date(e.timestamp).toLocaleTimeString()), ' ', e.message))
      }
      offset += (st.logEntries || []).length
    } catch { /* builds from an image reference may keep no log */ }
    if (job.phase === 'READY' || job.phase === 'FAILED') {
      done = true
      if (!logList.children.length) logList.append(h('li', { class: 'muted' }, 'This build kept no log.'))
    }
  })
  return stop
}
