// The console's shell: sign-in, navigation between pages (by the URL's
// hash, so the server serves one page) and sign-out.
import { session, get, whenUnauthorized, ApiError } from './api.js'
import { h, fill, errorBox, field } from './ui.js'
import * as overview from './pages/overview.js'
import * as sandboxes from './pages/sandboxes.js'
import * as sandbox from './pages/sandbox.js'
import * as templates from './pages/templates.js'
import * as build from './pages/build.js'
import * as snapshots from './pages/snapshots.js'
import * as node from './pages/node.js'
import * as teams from './pages/teams.js'
import * as audit from './pages/audit.js'

const routes = [
  [/^#\/overview$/, overview, 'Overview'],
  [/^#\/sandboxes$/, sandboxes, 'Sandboxes'],
  [/^#\/sandboxes\/([a-z0-9-]+)$/, sandbox, 'Sandbox'],
  [/^#\/templates$/, templates, 'Templates'],
  [/^#\/builds\/([a-z0-9_-]+)\/([a-z0-9_-]+)$/, build, 'Template build'],
  [/^#\/snapshots$/, snapshots, 'Snapshots'],
  [/^#\/node$/, node, 'Node'],
  [/^#\/teams$/, teams, 'Teams'],
  [/^#\/teams\/([A-Za-z0-9_-]+)$/, teams, 'Team'],
  [/^#\/audit$/, audit, 'Audit'],
]

const view = document.getElementById('view')
const nav = document.getElementById('nav')
const logout = document.getElementById('logout')
let stop = () => {}
// While a key is being checked, its refusal is shown by the form itself.
let checking = false

function signedIn (yes) {
  nav.hidden = !yes
  logout.hidden = !yes
}

function showSignIn (problem) {
  stop()
  stop = () => {}
  signedIn(false)
  document.title = 'Sign in · Cube console'
  const input = h('input', { type: 'password', name: 'apiKey', autocomplete: 'off', required: true, spellcheck: 'false' })
  const status = h('div')
  const form = h('form', { class: 'signin', 'aria-labelledby': 'signin-title' },
    h('h1', { id: 'signin-title' }, 'Sign in to Cube'),
    h('p', {}, 'Use one of the server\'s API keys (the one in the data directory\'s api-key file, or CUBE_API_KEY). It stays in this tab only.'),
    field('API key', input),
    status,
    h('button', { type: 'submit' }, 'Sign in'))
  if (problem) status.append(errorBox(problem))
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault()
    session.set(input.value.trim())
    fill(status, h('p', { class: 'muted' }, 'Checking the key…'))
    checking = true
    try {
      await get('/console/api/summary')
      checking = false
      if (!location.hash || location.hash === '#/signin') location.hash = '#/overview'
      else route()
    } catch (err) {
      checking = false
      session.clear()
      const msg = err instanceof ApiError && err.status === 401 ? new ApiError(401, `The server refused this API key: ${err.message}`) : err
      fill(status, errorBox(msg))
      input.focus()
    }
  })
  fill(view, form)
  input.focus()
}

function route () {
  stop()
  stop = () => {}
  if (!session.key) return showSignIn()
  signedIn(true)
  const hash = location.hash || '#/overview'
  for (const [re, page, title] of routes) {
    const m = hash.match(re)
    if (!m) continue
    document.title = `${title} · Cube console`
    for (const a of nav.querySelectorAll('a')) {
      if (hash.startsWith(a.getAttribute('href'))) a.setAttribute('aria-current', 'page')
      else a.removeAttribute('aria-current')
    }
    fill(view)
    stop = page.render(view, m.slice(1)) || (() => {})
    view.focus({ preventScroll: true })
    return
  }
  location.hash = '#/overview'
}

whenUnauthorized((message) => {
  if (checking) return
  session.clear()
  showSignIn(new ApiError(401, `The server refused the API key: ${message}`))
})

logout.addEventListener('click', () => {
  session.clear()
  location.hash = '#/signin'
  showSignIn()
})

window.addEventListener('hashchange', route)
route()
