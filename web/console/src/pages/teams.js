// Teams: every team (the admin key's view) or the caller's own, with its
// running sandboxes and quotas; one team at a time in detail: its usage
// over time (running sandboxes and starts, GET /teams/{id}/metrics), its
// API keys (made, renamed and revoked here, a new key shown once) and,
// for the admin key, its quotas and deletion.
// The admin key also makes teams. A team key acts on its own team through
// /api-keys; the admin key on another team through /admin/teams/{id} and
// X-Team-ID.
import { call, get, post, put, del, enc, session, ApiError } from '../api.js'
import { h, fill, errorBox, every, notify, confirmAction, facts, table, field, when, bytes } from '../ui.js'
import { TimeChart } from '../charts.js'

const POLL_MS = 5000
const MAX_PAGES = 20 // of running sandboxes, when a team key counts its own

/** The quotas a form sets, in wire.Quotas's order; disk is given in GiB. */
export const QUOTAS = [
  { key: 'runningSandboxes', label: 'Running sandboxes', integer: true },
  { key: 'vcpus', label: 'vCPUs', integer: true },
  { key: 'memoryMB', label: 'Memory (MiB)', integer: true },
  { key: 'maxTimeoutSeconds', label: 'Longest timeout (seconds)', integer: true },
  { key: 'diskGiB', label: 'Disk (GiB)', integer: false },
  { key: 'builds', label: 'Builds at once', integer: true },
  { key: 'requestsPerSecond', label: 'Requests per second, per key', integer: false },
]

const GiB = 2 ** 30

/** diskBytes as the form shows it, in GiB ('' for no limit). */
export function gib (diskBytes) {
  return diskBytes ? String(Number((diskBytes / GiB).toFixed(3))) : ''
}

/**
 * The wire.Quotas a quota form's texts (by QUOTAS key) stand for; empty is
 * 0, no limit. A disk text left as gib(previous.diskBytes) keeps the bytes
 * it was shown from. Throws on a negative, non-numeric or fractional
 * (where counts are whole) value.
 */
export function quotasFrom (texts, previous = {}) {
  const out = {}
  for (const { key, label, integer } of QUOTAS) {
    const text = String(texts[key] ?? '').trim()
    const n = text === '' ? 0 : Number(text)
    if (!Number.isFinite(n) || n < 0 || (integer && !Number.isInteger(n))) {
      throw new Error(`${label}: give ${integer ? 'a whole number' : 'a number'} of 0 or more (0 or empty: no limit)`)
    }
    if (key !== 'diskGiB') out[key] = n
    else out.diskBytes = previous.diskBytes && text === gib(previous.diskBytes) ? previous.diskBytes : Math.round(n * GiB)
  }
  return out
}

function duration (s) {
  if (s % 3600 === 0) return `${s / 3600} h`
  if (s % 60 === 0) return `${s / 60} min`
  return `${s} s`
}

/** A team's quotas in a line: only those set; "no limits" when none is. */
export function quotaSummary (q = {}) {
  const parts = []
  if (q.runningSandboxes) parts.push(`${q.runningSandboxes} running`)
  if (q.vcpus) parts.push(`${q.vcpus} vCPUs`)
  if (q.memoryMB) parts.push(`${bytes(q.memoryMB * 2 ** 20)} memory`)
  if (q.maxTimeoutSeconds) parts.push(`timeout ${duration(q.maxTimeoutSeconds)}`)
  if (q.diskBytes) parts.push(`${bytes(q.diskBytes)} disk`)
  if (q.builds) parts.push(`${q.builds} ${q.builds === 1 ? 'build' : 'builds'} at once`)
  if (q.requestsPerSecond) parts.push(`${q.requestsPerSecond} requests/s per key`)
  return parts.length ? parts.join(' · ') : 'no limits'
}

/** What is shown of a key: its prefix and the ends of its value. */
export function maskedKey (mask = {}) {
  return `${mask.prefix || ''}${mask.maskedValuePrefix || ''}…${mask.maskedValueSuffix || ''}`
}

/**
 * Whether key is an admin key, judged from the keys of its own team: the
 * admin flag of the one key whose mask it fits, or undefined when not
 * exactly one fits (the server is asked then).
 */
export function adminFromMasks (keys, key) {
  const fits = (keys || []).filter(({ mask: m = {} }) => {
    const prefix = m.prefix || ''
    return key.length === prefix.length + m.valueLength && key.startsWith(prefix + (m.maskedValuePrefix || '')) && key.endsWith(m.maskedValueSuffix || '')
  })
  return fits.length === 1 ? Boolean(fits[0].admin) : undefined
}

/** The periods a team's usage charts show, the first by default. */
export const PERIODS = [
  { label: 'last hour', seconds: 3600 },
  { label: 'last 6 hours', seconds: 6 * 3600 },
  { label: 'last 24 hours', seconds: 24 * 3600 },
  { label: 'last 7 days', seconds: 7 * 24 * 3600 },
]

/**
 * The columns of a team's usage charts from GET /teams/{id}/metrics
 * (E2B's TeamMetric, one per step): the step's times, the most sandboxes
 * running at once in each, and the sandboxes started in each per minute.
 */
export function usageColumns (metrics) {
  const ms = metrics || []
  return {
    times: ms.map((m) => m.timestampUnix),
    running: ms.map((m) => m.concurrentSandboxes),
    startsPerMinute: ms.map((m) => m.sandboxStartRate * 60),
  }
}

// Whether the signed-in key is the admin's, once known (for this key
// only: signing in with another forgets it).
const seen = { key: '', admin: undefined }

function forThisKey () {
  if (seen.key !== session.key) {
    seen.key = session.key
    seen.admin = undefined
  }
  return seen
}

/**
 * Running sandboxes by team ID: every team's for the admin key
 * (/admin/sandboxes/running-counts), else the caller's own, counted from
 * its list of running sandboxes. A key not known to be the admin's or not
 * is known after the first call.
 */
async function runningCounts (ownTeam) {
  const s = forThisKey()
  if (s.admin !== false) {
    try {
      const counts = await get('/admin/sandboxes/running-counts')
      s.admin = true
      return counts || {}
    } catch (err) {
      if (!(err instanceof ApiError && err.status === 403)) throw err
      s.admin = false
    }
  }
  let n = 0
  let token = ''
  for (let i = 0; i < MAX_PAGES; i++) {
    const res = await call('GET', `/v2/sandboxes?state=running&limit=100${token ? `&nextToken=${enc(token)}` : ''}`)
    n += (res.body || []).length
    token = res.headers.get('x-next-token')
    if (!token) break
  }
  return ownTeam ? { [ownTeam]: n } : {}
}

export function render (root, [selected]) {
  const problem = h('div')
  const pollProblem = h('div')
  const creator = h('div', { class: 'spaced' })
  const list = h('div')
  const detail = h('div')
  const listTitle = h('h2', { id: 'teams-title' }, 'All teams')
  fill(root, h('h1', {}, 'Teams'), problem,
    h('section', { 'aria-labelledby': 'teams-title' }, listTitle, pollProblem, list),
    creator, detail)

  let teams = []
  let counts = {}
  let current // the team shown in detail
  let charts = [] // the usage charts of the team shown
  let loadUsage = async () => {}
  let period = PERIODS[0]
  let stopped = false
  const runningCells = new Map() // team ID → its cell in the table, updated in place

  function runningText (team) {
    const n = counts[team.teamID] ?? 0
    const max = team.quotas && team.quotas.runningSandboxes
    return max ? `${n} of ${max}` : String(n)
  }

  function drawList () {
    runningCells.clear()
    const admin = forThisKey().admin
    listTitle.textContent = admin === false ? 'Your team' : 'All teams'
    fill(list, table(admin ? 'Teams of this Cube' : 'Your team', ['Team', 'ID', 'Running sandboxes', 'Quotas', 'Created'],
      teams.map((t) => {
        const cell = h('span', { 'data-testid': 'team-running' }, runningText(t))
        runningCells.set(t.teamID, cell)
        return [
          [h('a', { href: `#/teams/${t.teamID}`, 'aria-current': current && t.teamID === current.teamID ? 'true' : undefined }, t.name || t.teamID),
            t.isDefault ? h('span', { class: 'muted' }, ' (your team)') : null],
          h('code', {}, t.teamID),
          cell,
          quotaSummary(t.quotas),
          when(t.createdAt),
        ]
      }), 'No team.', { stack: true }))
  }

  async function loadTeams () {
    teams = (await get('/teams')) || []
    if (selected) {
      current = teams.find((t) => t.teamID === selected)
      if (!current) throw new ApiError(404, `team ${selected} not found`)
    } else {
      current = teams.find((t) => t.isDefault) || teams[0]
    }
    drawList()
  }

  async function poll () {
    if (stopped || !teams.length) return
    try {
      counts = await runningCounts(teams.find((t) => t.isDefault)?.teamID)
      fill(pollProblem)
    } catch (err) {
      fill(pollProblem, errorBox(err))
      return
    }
    if (stopped) return
    for (const team of teams) {
      const cell = runningCells.get(team.teamID)
      if (cell) cell.textContent = runningText(team)
    }
    await loadUsage()
  }

  // The team's usage over the period chosen, from its series
  // (GET /teams/{id}/metrics), asked again as the polls go by.
  function usage (t) {
    const running = new TimeChart('Running sandboxes', [{ label: 'most at once' }], { format: (v) => v.toFixed(0), whole: true })
    const starts = new TimeChart('Sandbox starts per minute', [{ label: 'started' }], { format: (v) => v.toFixed(1) })
    charts = [running, starts]
    const usageProblem = h('div')
    const choice = h('select', { name: 'period' }, PERIODS.map((p, i) => h('option', { value: String(i), selected: p === period }, p.label)))
    choice.addEventListener('change', () => { period = PERIODS[Number(choice.value)]; loadUsage(true) })
    let asked = 0
    loadUsage = async (now = false) => {
      // Asked again about once a step of the series: the server's steps
      // are about a 720th of the period.
      if (!now && Date.now() - asked < 0.8 * period.seconds * 1000 / 720) return
      asked = Date.now()
      const end = Math.floor(asked / 1000)
      let metrics
      try {
        metrics = await get(`/teams/${enc(t.teamID)}/metrics?start=${end - period.seconds}&end=${end}`)
        fill(usageProblem)
      } catch (err) {
        fill(usageProblem, errorBox(err))
        return
      }
      if (stopped || !charts.includes(running)) return
      const c = usageColumns(metrics)
      running.set(c.times, [c.running])
      starts.set(c.times, [c.startsPerMinute])
    }
    const periodField = field('Period', choice)
    periodField.classList.add('narrow')
    return h('section', { 'aria-labelledby': 'usage-title' },
      h('h3', { id: 'usage-title' }, 'Usage'),
      h('div', { class: 'row' }, periodField),
      usageProblem,
      h('div', { class: 'charts' }, running.el, starts.el))
  }

  function drawDetail () {
    charts.forEach((c) => c.destroy())
    charts = []
    loadUsage = async () => {}
    if (!current) return fill(detail)
    const t = current
    const admin = forThisKey().admin
    const keys = h('div', { 'aria-live': 'polite' })
    const keyProblem = h('div')
    const shown = h('div')
    fill(detail, h('section', { 'aria-labelledby': 'team-title' },
      h('h2', { id: 'team-title' }, 'Team ', t.name || t.teamID),
      facts([
        ['ID', h('code', {}, t.teamID)],
        ['Created', when(t.createdAt)],
        ['Quotas', quotaSummary(t.quotas)],
      ]),
      usage(t),
      admin ? quotaForm(t) : null,
      h('h3', { id: 'keys-title' }, 'API keys'),
      keyProblem, shown, keys,
      newKeyForm(t, shown, keyProblem, () => loadKeys(t, keys, keyProblem)),
      admin && !t.isDefault ? deleteTeam(t) : null))
    loadKeys(t, keys, keyProblem)
    loadUsage(true)
  }

  // The caller's own team is reached through /api-keys; another team (by
  // the admin key) with X-Team-ID, and its keys made and revoked through
  // /admin/teams/{id}/api-keys.
  const keyOpts = (t) => t.isDefault ? {} : { team: t.teamID }

  async function loadKeys (t, box, keyProblem) {
    let keys
    try {
      keys = (await call('GET', '/api-keys', undefined, keyOpts(t))).body || []
    } catch (err) {
      fill(box, errorBox(err))
      return
    }
    fill(box, table(`API keys of team ${t.name}`, ['Name', 'Key', 'Created', 'Last used', 'Actions'],
      keys.map((k) => [
        [k.name || '–', k.admin ? [' ', h('span', { class: 'badge' }, 'admin')] : null],
        h('code', {}, maskedKey(k.mask)),
        when(k.createdAt),
        k.lastUsed ? when(k.lastUsed) : 'never',
        h('span', { class: 'actions' },
          h('button', {
            type: 'button',
            class: 'secondary',
            'aria-label': `Rename key ${k.name}`,
            onclick: async () => {
              const input = h('input', { value: k.name || '', autocomplete: 'off', spellcheck: 'false' })
              if (!await confirmAction(`Rename key ${maskedKey(k.mask)}.`, { ok: 'Rename', extra: field('New name', input) })) return
              try {
                await call('PATCH', `/api-keys/${enc(k.id)}`, { name: input.value.trim() }, keyOpts(t))
                fill(keyProblem)
                notify(`Renamed key ${maskedKey(k.mask)} to ${input.value.trim()}`)
              } catch (err) { fill(keyProblem, errorBox(err)) }
              loadKeys(t, box, keyProblem)
            },
          }, 'Rename'),
          h('button', {
            type: 'button',
            class: 'danger',
            'aria-label': `Revoke key ${k.name}`,
            onclick: async () => {
              if (!await confirmAction(`Revoke key ${k.name} (${maskedKey(k.mask)}) of team ${t.name}? Every request with it is refused from now on; if you signed in with it, you are signed out.`, { ok: 'Revoke', danger: true })) return
              try {
                if (t.isDefault) await del(`/api-keys/${enc(k.id)}`)
                else await del(`/admin/teams/${enc(t.teamID)}/api-keys/${enc(k.id)}`)
                fill(keyProblem)
                notify(`Revoked key ${k.name}`)
              } catch (err) { fill(keyProblem, errorBox(err)) }
              loadKeys(t, box, keyProblem)
            },
          }, 'Revoke')),
      ]), 'This team has no key.', { stack: true }))
  }

  function newKeyForm (t, shown, keyProblem, reload) {
    const name = h('input', { name: 'keyName', required: true, autocomplete: 'off', spellcheck: 'false', maxlength: '100' })
    const status = h('div')
    const form = h('form', { class: 'create spaced', 'aria-labelledby': 'newkey-title' },
      h('h3', { id: 'newkey-title' }, 'New API key'),
      h('div', { class: 'row' }, field('Key name', name)),
      h('button', { type: 'submit' }, 'Create key'), status)
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault()
      fill(status)
      try {
        const k = t.isDefault
          ? await post('/api-keys', { name: name.value.trim() })
          : await post(`/admin/teams/${enc(t.teamID)}/api-keys`, { name: name.value.trim() })
        name.value = ''
        fill(keyProblem)
        fill(shown, keyOnce(k, () => fill(shown)))
        shown.querySelector('input').select()
        reload()
      } catch (err) {
        fill(status, errorBox(err))
      }
    })
    return form
  }

  function quotaForm (t) {
    const inputs = {}
    const q = t.quotas || {}
    for (const { key, integer } of QUOTAS) {
      const value = key === 'diskGiB' ? gib(q.diskBytes) : q[key] ? String(q[key]) : ''
      inputs[key] = h('input', { name: key, type: 'number', min: '0', step: integer ? '1' : 'any', value, placeholder: 'no limit' })
    }
    const status = h('div')
    const form = h('form', { class: 'create spaced', 'aria-labelledby': 'quotas-title' },
      h('h3', { id: 'quotas-title' }, `Quotas of team ${t.name}`),
      h('p', { class: 'muted' }, 'Empty or 0: no limit. A change applies to what the team does next; nothing running is stopped.'),
      h('div', { class: 'row' }, QUOTAS.map(({ key, label }) => field(label, inputs[key]))),
      h('button', { type: 'submit' }, 'Save quotas'), status)
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault()
      fill(status)
      try {
        const texts = Object.fromEntries(Object.entries(inputs).map(([k, el]) => [k, el.value]))
        const updated = await put(`/teams/${enc(t.teamID)}/quotas`, quotasFrom(texts, q))
        notify(`Saved the quotas of team ${t.name}`)
        await reload(updated && updated.teamID)
      } catch (err) {
        fill(status, errorBox(err))
      }
    })
    return form
  }

  function deleteTeam (t) {
    return h('div', { class: 'actions' }, h('button', {
      type: 'button',
      class: 'danger',
      onclick: async () => {
        if (!await confirmAction(`Delete team ${t.name} (${t.teamID})? Its keys are revoked at once. A team that still owns sandboxes, templates, snapshots, volumes or secrets cannot be deleted.`, { ok: 'Delete team', danger: true })) return
        try {
          await del(`/teams/${enc(t.teamID)}`)
          notify(`Deleted team ${t.name}`)
          if (location.hash === '#/teams') await reload()
          else location.hash = '#/teams'
        } catch (err) {
          fill(problem, errorBox(err))
          problem.scrollIntoView({ block: 'nearest' })
        }
      },
    }, 'Delete team'))
  }

  function createForm () {
    const name = h('input', { name: 'teamName', required: true, autocomplete: 'off', spellcheck: 'false', maxlength: '100' })
    const inputs = {}
    for (const { key, integer } of QUOTAS) inputs[key] = h('input', { name: key, type: 'number', min: '0', step: integer ? '1' : 'any', placeholder: 'no limit' })
    const status = h('div')
    const form = h('form', { class: 'create', 'aria-labelledby': 'newteam-title' },
      h('h2', { id: 'newteam-title' }, 'New team'),
      h('div', { class: 'row' }, field('Team name', name)),
      h('div', { class: 'row' }, QUOTAS.map(({ key, label }) => field(label, inputs[key]))),
      h('button', { type: 'submit' }, 'Create team'), status)
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault()
      fill(status)
      try {
        const texts = Object.fromEntries(Object.entries(inputs).map(([k, el]) => [k, el.value]))
        const made = await post('/teams', { name: name.value.trim(), quotas: quotasFrom(texts) })
        notify(`Created team ${made.name}: make it a key below`)
        location.hash = `#/teams/${made.teamID}`
      } catch (err) {
        fill(status, errorBox(err))
      }
    })
    return form
  }

  // reload lists the teams again and shows the one current was (or the
  // one named) afresh.
  async function reload (id) {
    if (current && !id) id = current.teamID
    try {
      await loadTeams()
      if (id && !selected) current = teams.find((t) => t.teamID === id) || current
      fill(problem)
    } catch (err) {
      fill(problem, errorBox(err))
      return
    }
    drawList()
    drawDetail()
  }

  let stopPolling = () => {}
  ;(async () => {
    try {
      // Whether the key is the admin's: only the admin key sees several
      // teams; else its own team's keys tell, or the first poll does.
      await loadTeams()
      const s = forThisKey()
      if (s.admin === undefined && teams.length > 1) s.admin = true
      if (s.admin === undefined) s.admin = adminFromMasks(await get('/api-keys').catch(() => []), session.key)
      await poll()
    } catch (err) {
      fill(problem, errorBox(err))
      if (!teams.length) return
    }
    if (stopped) return
    if (forThisKey().admin) fill(creator, createForm())
    drawList()
    drawDetail()
    // every() runs at once too: that sample was just taken.
    let first = true
    stopPolling = every(POLL_MS, () => first ? (first = false) : poll())
  })()
  return () => {
    stopped = true
    stopPolling()
    charts.forEach((c) => c.destroy())
  }
}

/** The new key, shown once, with a button that copies it. */
function keyOnce (k, done) {
  const input = h('input', { readOnly: true, value: k.key, spellcheck: 'false', 'data-testid': 'new-key' })
  return h('div', { class: 'keybox', role: 'status' },
    h('p', {}, h('strong', {}, `Key ${k.name} was made.`), ' Copy it now: it will not be shown again.'),
    field('New API key', input),
    h('div', { class: 'actions' },
      h('button', { type: 'button', onclick: () => copy(input) }, 'Copy'),
      h('button', { type: 'button', class: 'secondary', onclick: done }, 'Done')))
}

async function copy (input) {
  try {
    await navigator.clipboard.writeText(input.value)
    notify('Copied the key')
  } catch {
    // No clipboard API outside a secure context: the key is selected for
    // the browser's own copy.
    input.focus()
    input.select()
    notify(document.execCommand && document.execCommand('copy') ? 'Copied the key' : 'The key is selected: copy it with Ctrl+C or ⌘C')
  }
}
