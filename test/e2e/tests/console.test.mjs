// The web console at /console, driven in headless Chromium (Debian's
// package, through playwright-core) against the suite's real server:
// sign-in, every page, a sandbox's whole life from the UI, a template
// build watched to READY, and this node drained and made ready again.
// Screenshots of each page go to test/e2e/artifacts/console-<mode>/.
import { describe, test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { chmodSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { createHash, X509Certificate } from 'node:crypto'
import { execFileSync, spawn } from 'node:child_process'
import { createConnection, createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { chromium } from 'playwright-core'
import { api, apiKey, apiUrl, caFile, eventually, mode, runTag, wrongKey } from './helpers.mjs'

const CHROMIUM = process.env.CUBE_E2E_CHROMIUM ?? '/usr/bin/chromium'
const artifacts = join(dirname(fileURLToPath(import.meta.url)), '..', 'artifacts', `console-${mode}`)
const consoleUrl = `${apiUrl}/console`
// Generous: the machine is shared and a build unpacks a whole image.
const BUILD_TIMEOUT_MS = 8 * 60_000
const UI_TIMEOUT_MS = 60_000

let browser, context, page
const problems = [] // console errors and uncaught exceptions, on any page
const sandboxes = new Set()
const templates = new Set()
// The node the UI drained, until it is seen ready again: later tests (and
// other files) create sandboxes on it.
let drained

// Chromium trusts Cube's local CA through its key's hash, as an operator
// would trust it; no other certificate error is let through.
function trustArgs() {
  if (!apiUrl.startsWith('https:') || !caFile) return []
  const key = new X509Certificate(readFileSync(caFile)).publicKey.export({ type: 'spki', format: 'der' })
  return [`--ignore-certificate-errors-spki-list=${createHash('sha256').update(key).digest('base64')}`]
}

async function shot(name) {
  await page.screenshot({ path: join(artifacts, `${name}.png`), fullPage: true })
}

/** The sandbox ID in the page's URL (#/sandboxes/<id>). */
function shownSandbox() {
  const m = new URL(page.url()).hash.match(/^#\/sandboxes\/([a-z0-9-]+)$/)
  return m && m[1]
}

/** Opens a section of the console from its navigation bar. */
function section(name) {
  return page.locator('#nav').getByRole('link', { name, exact: true }).click()
}

async function confirmWith(button) {
  const dialog = page.getByRole('dialog')
  await dialog.waitFor()
  await dialog.getByRole('button', { name: button, exact: true }).click()
  await dialog.waitFor({ state: 'hidden' })
}

// A year in an axis label: 2026, or the 7/14/26 of uPlot's own labels.
const YEAR = /\b(19|20)\d\d\b|\/\d\d\b/

/**
 * The x axis labels of the chart named name as first drawn with exactly
 * one sample (the figure's data-x-labels, which a sample empties until the
 * axis is drawn again). Polled at every frame: the next sample comes a
 * poll later.
 */
async function onePointLabels(name) {
  const labels = await page.waitForFunction((caption) => {
    const fig = [...document.querySelectorAll('figure.chart')].find((f) => f.querySelector('figcaption')?.textContent === caption)
    return fig && fig.dataset.points === '1' && fig.dataset.xLabels ? fig.dataset.xLabels : false
  }, name, { polling: 'raf' })
  return labels.jsonValue()
}

async function chartPoints(name, min) {
  const fig = page.locator('figure.chart', { has: page.locator('figcaption', { hasText: new RegExp(`^${name}$`) }) })
  await eventually(async () => Number(await fig.getAttribute('data-points')) >= min, {
    what: `${min} samples in the ${name} chart`, timeoutMs: UI_TIMEOUT_MS,
  })
  assert.equal(await fig.locator('canvas').count(), 1, `${name} is drawn on a canvas`)
  return fig
}

// The browser runs on the sandboxes' host, whose interfaces come and go
// with their network slots; Chromium fails the requests it has in flight
// when the host's network changes (ERR_NETWORK_CHANGED), which an
// operator's browser elsewhere never sees. So it runs in a network
// namespace of its own, with only a loopback: the server's port there is
// relayed to the server through a Unix socket (which every namespace
// shares), and its names under localhost resolve to that loopback.
const browserNs = `cube-e2e-browser-${process.pid}`
const relaySock = join(tmpdir(), `${browserNs}.sock`)
const launcher = join(tmpdir(), `${browserNs}.sh`)
let hostRelay, nsRelay

function pipeBoth(a, b) {
  a.on('error', () => b.destroy())
  b.on('error', () => a.destroy())
  a.pipe(b).pipe(a)
}

async function isolateBrowser() {
  const u = new URL(apiUrl)
  const port = Number(u.port || (u.protocol === 'https:' ? 443 : 80))
  execFileSync('ip', ['netns', 'add', browserNs])
  execFileSync('ip', ['-n', browserNs, 'link', 'set', 'lo', 'up'])
  rmSync(relaySock, { force: true })
  hostRelay = createServer((c) => pipeBoth(c, createConnection(port, '127.0.0.1')))
  await new Promise((resolve, reject) => hostRelay.listen(relaySock, resolve).on('error', reject))
  const inNs = `const net = require('node:net');
    net.createServer((c) => { const u = net.connect(process.argv[2]);
      c.on('error', () => u.destroy()); u.on('error', () => c.destroy()); c.pipe(u).pipe(c) })
      .listen(Number(process.argv[1]), '127.0.0.1', () => console.log('ready'))`
  nsRelay = spawn('ip', ['netns', 'exec', browserNs, process.execPath, '-e', inNs, String(port), relaySock], { stdio: ['ignore', 'pipe', 'inherit'] })
  await new Promise((resolve, reject) => {
    nsRelay.stdout.once('data', resolve)
    nsRelay.once('exit', (code) => reject(new Error(`the relay in ${browserNs} exited with ${code}`)))
  })
  writeFileSync(launcher, `#!/bin/sh\nexec ip netns exec ${browserNs} ${CHROMIUM} "$@"\n`)
  chmodSync(launcher, 0o755)
}

function releaseBrowserNetwork() {
  nsRelay?.kill()
  hostRelay?.close()
  rmSync(relaySock, { force: true })
  rmSync(launcher, { force: true })
  try { execFileSync('ip', ['netns', 'delete', browserNs]) } catch {}
}

before(async () => {
  mkdirSync(artifacts, { recursive: true })
  await isolateBrowser()
  const args = ['--no-sandbox', ...trustArgs()]
  browser = await chromium.launch({ executablePath: launcher, headless: true, args })
  context = await browser.newContext({ viewport: { width: 1280, height: 900 } })
  context.setDefaultTimeout(UI_TIMEOUT_MS)
  page = await context.newPage()
  page.on('console', (msg) => { if (msg.type() === 'error') problems.push(`console: ${msg.text()} (${page.url()})`) })
  page.on('pageerror', (err) => problems.push(`uncaught: ${err.message} (${page.url()})`))
})

after(async () => {
  if (drained) await api('POST', `/nodes/${drained}`, { status: 'ready' })
  await browser?.close()
  releaseBrowserNetwork()
  await Promise.all([...sandboxes].map((id) => api('DELETE', `/sandboxes/${id}`)))
  await Promise.all([...templates].map((id) => api('DELETE', `/templates/${id}`)))
})

describe('web console', { concurrency: false }, () => {
  test('the page and its assets come from the server, with no key', async () => {
    for (const path of ['/console', '/console/assets/app.js', '/console/assets/app.css']) {
      const res = await fetch(apiUrl + path)
      assert.equal(res.status, 200, path)
      assert.match(res.headers.get('content-security-policy') ?? '', /default-src 'none'/, path)
    }
    const data = await api('GET', '/console/api/summary', undefined, { key: wrongKey })
    assert.equal(data.status, 401)
    assert.equal(data.json.code, 401)
  })

  test('a wrong key shows an error and no data', async () => {
    const before = problems.length
    await page.goto(consoleUrl)
    await page.getByLabel('API key').fill(wrongKey)
    await page.getByRole('button', { name: 'Sign in' }).click()
    const alert = page.getByRole('alert')
    await alert.waitFor()
    assert.match(await alert.textContent(), /refused this API key.*401/)
    assert.equal(await page.locator('#nav').isVisible(), false, 'no navigation')
    assert.equal(await page.locator('table, .stat, figure').count(), 0, 'no data')
    assert.equal(await page.evaluate(() => sessionStorage.length), 0, 'the wrong key is not kept')
    await shot('signin-error')
    // The browser reports the refused request itself; nothing else.
    const refused = problems.splice(before)
    assert.ok(refused.every((p) => /status of 401/.test(p)), refused.join('\n'))
  })

  test('sign in and watch the overview update', async () => {
    await page.getByLabel('API key').fill(apiKey)
    await page.getByRole('button', { name: 'Sign in' }).click()
    await page.getByRole('heading', { name: 'Overview' }).waitFor()
    assert.equal(await page.evaluate(() => sessionStorage.getItem('cube.apiKey')), apiKey)
    assert.equal(await page.evaluate(() => localStorage.length), 0, 'the key is kept in sessionStorage only')
    // A chart of one sample spans minutes around it, labelled with times
    // of day: never years.
    const single = await onePointLabels('Host CPU')
    assert.match(single, /\d:\d\d/, `Host CPU's axis with one sample: ${single}`)
    assert.doesNotMatch(single, YEAR, `Host CPU's axis with one sample: ${single}`)
    await chartPoints('Host CPU', 2)
    await chartPoints('Sandboxes', 3)
    for (const fig of await page.locator('figure.chart').all()) {
      const labels = await fig.getAttribute('data-x-labels')
      assert.doesNotMatch(labels ?? '', YEAR, `${await fig.locator('figcaption').textContent()}: ${labels}`)
    }
    assert.match(await page.locator('.stats').textContent(), /Capacity used\s*\d+ \/ \d+/)
    await shot('overview')
  })

  test('templates list the default template', async () => {
    await section('Templates')
    const row = page.locator('table tr', { hasText: 'code-interpreter-v1' })
    await row.waitFor()
    assert.match(await row.textContent(), /base/)
    assert.match(await row.textContent(), /ready/)
    await shot('templates')
  })

  test('a sandbox from the UI: list, detail with charts, pause, resume, snapshot (and a sandbox from it), kill', async () => {
    await section('Sandboxes')
    await page.getByRole('heading', { name: 'New sandbox' }).waitFor()
    const tpl = page.getByLabel('Template', { exact: true }).first()
    await eventually(async () => (await tpl.locator('option').count()) > 0, { what: 'templates in the form' })
    await tpl.selectOption({ label: 'base (code-interpreter)' })
    await page.locator('form.create').getByLabel('Metadata').fill(`console=${runTag}`)
    await page.getByRole('button', { name: 'Create sandbox' }).click()
    await page.waitForURL(/#\/sandboxes\/[a-z0-9-]+$/)
    const id = shownSandbox()
    sandboxes.add(id)
    assert.equal((await api('GET', `/sandboxes/${id}`)).json.metadata.console, runTag)

    const state = page.getByTestId('state')
    await eventually(async () => (await state.textContent()) === 'running', { what: 'state running' })
    await chartPoints('CPU', 2)
    await chartPoints('Memory', 2)
    await page.locator('ol.log li', { hasText: /created|started|restored/i }).first().waitFor()
    assert.match(await page.locator('section[aria-labelledby="net-title"] dl').textContent(), /Internet access\s*allowed/)
    await shot('sandbox')

    // In the list, found by its metadata.
    await section('Sandboxes')
    await page.locator('form.filters').getByLabel('Metadata').fill(`console=${runTag}`)
    await page.getByRole('button', { name: 'Apply' }).click()
    await page.getByRole('link', { name: id }).waitFor()
    assert.equal(await page.locator('table tbody tr').count(), 1)
    await shot('sandboxes')

    await page.getByRole('link', { name: id }).click()
    await page.getByRole('button', { name: 'Pause' }).click()
    await confirmWith('Pause')
    await eventually(async () => (await state.textContent()) === 'paused', { what: 'state paused in the page' })
    assert.equal((await api('GET', `/sandboxes/${id}`)).json.state, 'paused')

    await page.getByRole('button', { name: 'Resume' }).click()
    await confirmWith('Resume')
    await eventually(async () => (await state.textContent()) === 'running', { what: 'state running again' })
    assert.equal((await api('GET', `/sandboxes/${id}`)).json.state, 'running')

    await page.getByRole('button', { name: 'Snapshot' }).click()
    await confirmWith('Snapshot')
    const snapshot = await eventually(async () => {
      const res = await api('GET', `/snapshots?sandboxID=${id}`)
      return (res.json ?? []).find((s) => s.sandboxID === id)
    }, { what: 'the snapshot in GET /snapshots' })
    templates.add(snapshot.snapshotID)

    await section('Snapshots')
    const snapRow = page.locator('table tr', { hasText: snapshot.snapshotID })
    await snapRow.waitFor()
    await shot('snapshots')
    // A sandbox started from the snapshot opens in its own page.
    await snapRow.getByRole('button', { name: 'Create sandbox' }).click()
    await confirmWith('Create sandbox')
    await page.waitForURL((url) => /^#\/sandboxes\/[a-z0-9-]+$/.test(url.hash) && !url.hash.endsWith(id))
    const child = shownSandbox()
    sandboxes.add(child)
    assert.equal((await api('GET', `/sandboxes/${child}`)).json.templateID, snapshot.snapshotID)
    await eventually(async () => (await state.textContent()) === 'running', { what: 'the sandbox from the snapshot running' })
    await section('Snapshots')
    assert.equal((await api('DELETE', `/sandboxes/${child}`)).status, 204)
    sandboxes.delete(child)
    await snapRow.getByRole('button', { name: 'Delete' }).click()
    await confirmWith('Delete')
    await snapRow.waitFor({ state: 'detached' })
    assert.equal((await api('GET', `/templates/${snapshot.snapshotID}`)).status, 404)

    await page.goto(`${consoleUrl}#/sandboxes/${id}`)
    await page.getByRole('button', { name: 'Kill' }).click()
    await confirmWith('Kill')
    await page.waitForURL(/#\/sandboxes$/)
    assert.equal((await api('GET', `/sandboxes/${id}`)).status, 404)
    sandboxes.delete(id)
  })

  test('a template build from the UI reaches READY', { timeout: BUILD_TIMEOUT_MS + 60_000 }, async () => {
    const name = `console-${runTag}-${mode}`
    templates.add(name)
    await section('Templates')
    await page.getByLabel('Image reference').fill('oci-archive:default-image.tar')
    await page.getByLabel('Template ID').fill(name)
    await page.getByLabel('Writable layer size').fill('512M')
    await page.getByRole('button', { name: 'Build', exact: true }).click()
    await page.waitForURL(new RegExp(`#/builds/${name}/`))
    const phase = page.getByTestId('phase')
    const seen = new Set()
    await eventually(async () => {
      const p = await phase.textContent()
      seen.add(p)
      assert.notEqual(p, 'FAILED', await page.locator('.error').allTextContents().then((t) => t.join(' ')))
      return p === 'READY'
    }, { what: () => `phase READY (seen ${[...seen].join(', ')})`, timeoutMs: BUILD_TIMEOUT_MS, intervalMs: 500 })
    assert.equal(await page.locator('progress').getAttribute('value'), '100')
    await shot('build')
    assert.equal((await api('GET', `/templates/${name}`)).json.status, 'ready')
  })

  test('node page: version, runtime, data directory and benchmarks', async () => {
    await section('Node')
    const facts = page.locator('dl.facts')
    await facts.getByText('Data filesystem').waitFor()
    const health = await api('GET', '/health')
    assert.match(await facts.textContent(), new RegExp(`Version\\s*${health.json.version ?? ''}`))
    assert.match(await facts.textContent(), /gVisor/)
    assert.match(await facts.textContent(), /used of/)
    await page.locator('#bench-title ~ div table').first().waitFor()
    assert.ok(await page.locator('#bench-title ~ div table').count() >= 2, 'machine and targets tables')
  })

  test('node page: this server in the nodes table, drained and made ready again from the UI', async () => {
    const self = (await api('GET', '/nodes')).json.find((n) => n.self)
    assert.ok(self, 'GET /nodes lists this server')
    assert.equal(self.status, 'ready')
    const nodes = page.getByRole('table', { name: 'Nodes of the service' })
    await nodes.waitFor()
    for (const col of ['Node', 'Status', 'Address', 'Version', 'CPU', 'Memory', 'Sandboxes', 'Actions']) {
      await nodes.getByRole('columnheader', { name: col, exact: true }).waitFor()
    }
    const row = nodes.locator('tbody tr', { has: page.getByRole('rowheader', { name: new RegExp(`^${self.id} \\(this node\\)$`) }) })
    await row.waitFor()
    assert.match(await row.textContent(), new RegExp(self.address.replace(/[.:/]/g, '\\$&')))
    assert.match(await row.textContent(), /\d+ running/)
    const status = row.getByTestId('node-status')
    await eventually(async () => (await status.textContent()) === 'ready', { what: 'the node ready in the page' })

    drained = self.id
    await row.getByRole('button', { name: `Drain node ${self.id}` }).click()
    await confirmWith('Drain')
    await eventually(async () => (await status.textContent()) === 'draining', { what: 'the node draining in the page' })
    assert.equal((await api('GET', `/nodes/${self.id}`)).json.status, 'draining')
    // The focus moves to the button that replaced the one pressed.
    await eventually(async () => (await page.evaluate(() => document.activeElement?.getAttribute('aria-label'))) === `Uncordon node ${self.id}`,
      { what: 'the focus on the Uncordon button' })

    await row.getByRole('button', { name: `Uncordon node ${self.id}` }).click()
    await confirmWith('Uncordon')
    await eventually(async () => (await status.textContent()) === 'ready', { what: 'the node ready again in the page' })
    assert.equal((await api('GET', `/nodes/${self.id}`)).json.status, 'ready')
    drained = undefined
    await row.getByRole('button', { name: `Drain node ${self.id}` }).waitFor()
    await shot('node')
  })

  test('teams page: the first team, its running sandboxes, quotas and keys', async () => {
    await section('Teams')
    const teams = page.getByRole('table', { name: 'Teams of this Cube' })
    await teams.waitFor()
    const row = teams.locator('tbody tr', { has: page.getByRole('link', { name: 'default', exact: true }) })
    await row.waitFor()
    assert.match(await row.textContent(), /00000000-0000-4000-8000-000000000001/)
    await page.getByRole('heading', { name: 'Team default', exact: true }).waitFor()
    await page.getByRole('table', { name: 'API keys of team default' }).getByRole('rowheader').first().waitFor()
    await chartPoints('Running sandboxes', 1)
    await shot('teams')
  })

  test('audit page: the node drained and made ready again', async () => {
    await section('Audit')
    const trail = page.getByRole('table', { name: /^Changes made through the API/ })
    const rows = trail.locator('tbody tr', { hasText: 'POST /nodes/{nodeID}' })
    // The trail is written off the requests' path: the page is refreshed
    // until it holds them.
    await eventually(async () => {
      if ((await rows.count()) >= 2) return true
      await page.getByRole('button', { name: 'Refresh' }).click()
      return false
    }, { what: 'the drain and the uncordon in the audit trail' })
    assert.match(await rows.first().textContent(), /default/)
    await shot('audit')
  })

  test('at phone width nothing scrolls sideways', async () => {
    await page.setViewportSize({ width: 390, height: 844 })
    for (const [hash, ready] of [['#/overview', 'figure.chart canvas'], ['#/sandboxes', 'form.filters'], ['#/node', '.stack table'], ['#/templates', 'table'], ['#/teams', '.stack table'], ['#/audit', 'table']]) {
      await page.goto(`${consoleUrl}${hash}`)
      await page.locator(ready).first().waitFor()
      const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth)
      assert.ok(overflow <= 0, `${hash}: the page is ${overflow}px wider than the screen`)
      if (hash === '#/node') {
        // The nodes table is laid out as cards: it does not scroll either.
        const wide = await page.locator('.stack').evaluate((el) => el.scrollWidth - el.clientWidth)
        assert.ok(wide <= 0, `the nodes table is ${wide}px wider than its box`)
        await shot('phone-node')
      }
    }
    await shot('phone-templates')
    await page.goto(`${consoleUrl}#/overview`)
    await chartPoints('Host CPU', 2)
    await shot('phone-overview')
    await page.setViewportSize({ width: 1280, height: 900 })
  })

  test('sign out forgets the key', async () => {
    await page.getByRole('button', { name: 'Sign out' }).click()
    await page.getByRole('button', { name: 'Sign in' }).waitFor()
    assert.equal(await page.evaluate(() => sessionStorage.length), 0)
    await page.reload()
    await page.getByRole('button', { name: 'Sign in' }).waitFor()
  })

  test('no console errors on any page', () => {
    assert.deepEqual(problems, [])
  })
})
