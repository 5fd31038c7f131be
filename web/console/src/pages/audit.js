// Audit: the changes made through the API (GET /audit), newest first, a
// page at a time: "Older" continues before the last entry shown (the
// X-Next-Token the server sends, as ?before=). The admin key sees every
// team's entries and may keep to one team's.
import { call, get, enc } from '../api.js'
import { h, fill, errorBox, when, table, field } from '../ui.js'

const PAGE = 50

/** The request an entry records: its route, which names the method already. */
export function requestOf (e) {
  const route = e.route || ''
  return route.startsWith(`${e.method} `) ? route : `${e.method || ''} ${route}`.trim()
}

export function render (root) {
  const team = h('select', { name: 'team' }, h('option', { value: '' }, 'every team'))
  const teamField = field('Team', team)
  teamField.hidden = true
  const list = h('div', { 'aria-live': 'polite' })
  const pager = h('nav', { class: 'pager', 'aria-label': 'Pages' })
  const tokens = [''] // the ?before= of each page seen, for going back
  let page = 0
  const names = new Map() // team ID → name

  async function load () {
    let q = `limit=${PAGE}`
    if (team.value) q += `&team=${enc(team.value)}`
    if (tokens[page]) q += `&before=${enc(tokens[page])}`
    let res
    try {
      res = await call('GET', `/audit?${q}`)
    } catch (err) {
      fill(list, errorBox(err))
      fill(pager)
      return
    }
    const next = res.headers.get('x-next-token')
    tokens[page + 1] = next || undefined
    fill(list, table(`Changes made through the API, page ${page + 1}`, ['Time', 'Team', 'Key', 'Request', 'Target', 'Status'],
      (res.body || []).map((e) => [
        h('time', { datetime: e.time }, when(e.time)),
        names.get(e.teamID) || h('code', {}, e.teamID),
        e.keyName || (e.keyID ? h('code', {}, e.keyID) : '–'),
        h('code', {}, requestOf(e)),
        e.target ? h('code', {}, e.target) : '–',
        h('span', { class: `badge ${e.status >= 400 ? 'failed' : 'ok'}` }, e.status),
      ]), page ? 'No older change.' : 'No change recorded yet.', { stack: true }))
    fill(pager,
      h('button', { type: 'button', class: 'secondary', disabled: page === 0, onclick: () => { page--; load() } }, 'Newer'),
      h('span', {}, `Page ${page + 1}`),
      h('button', { type: 'button', class: 'secondary', disabled: !next, onclick: () => { page++; load() } }, 'Older'))
  }

  const restart = () => { tokens.length = 1; page = 0; load() }
  const filters = h('form', { class: 'filters', 'aria-label': 'Filter the audit trail' },
    teamField, h('button', { type: 'submit' }, 'Refresh'))
  filters.addEventListener('submit', (ev) => { ev.preventDefault(); restart() })
  team.addEventListener('change', restart)

  fill(root, h('h1', {}, 'Audit'),
    h('p', { class: 'muted' }, 'Every change made through the API: who made it (team and key), the route and what it named, and how it was answered. Reads are not recorded.'),
    filters, list, pager)
  // Team names; only the admin key sees more than one team, and gets the
  // filter.
  get('/teams').then((teams) => {
    for (const t of teams || []) names.set(t.teamID, t.name)
    if ((teams || []).length > 1) {
      team.append(...teams.map((t) => h('option', { value: t.teamID }, t.name || t.teamID)))
      teamField.hidden = false
    }
  }).catch(() => { /* the IDs are shown instead */ }).finally(load)
}
