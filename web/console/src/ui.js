// Small DOM helpers: elements are built with h(), never from HTML strings,
// so no value from the server is ever parsed as markup.

export function h (tag, props = {}, ...children) {
  const el = document.createElement(tag)
  for (const [k, v] of Object.entries(props || {})) {
    if (v === undefined || v === null || v === false) continue
    if (k.startsWith('on')) el.addEventListener(k.slice(2).toLowerCase(), v)
    else if (k === 'class') el.className = v
    else if (k in el && typeof v !== 'string') el[k] = v
    else el.setAttribute(k, v === true ? '' : v)
  }
  append(el, children)
  return el
}

function append (el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue
    el.append(c instanceof Node ? c : String(c))
  }
}

/** Replaces el's children. */
export function fill (el, ...children) {
  el.replaceChildren()
  append(el, children)
  return el
}

/** An error box that screen readers announce. */
export function errorBox (err) {
  const status = err && err.status ? ` (${err.status})` : ''
  return h('div', { class: 'error', role: 'alert' }, `${err && err.message ? err.message : err}${status}`)
}

/** Shows a short message in the page's status line. */
export function notify (text) {
  const n = document.getElementById('notice')
  n.textContent = text
  clearTimeout(notify.timer)
  notify.timer = setTimeout(() => { n.textContent = '' }, 6000)
}

/**
 * Asks for confirmation in a modal dialog; resolves to true, or false on
 * cancel. extra, when given, is a form control shown in the dialog (its
 * value is read by the caller).
 */
export function confirmAction (text, { ok = 'Confirm', extra, danger = false } = {}) {
  const dlg = document.getElementById('confirm')
  document.getElementById('confirm-text').textContent = text
  fill(document.getElementById('confirm-extra'), extra)
  const okBtn = document.getElementById('confirm-ok')
  okBtn.textContent = ok
  okBtn.className = danger ? 'danger' : ''
  dlg.returnValue = ''
  return new Promise((resolve) => {
    dlg.addEventListener('close', () => resolve(dlg.returnValue === 'ok'), { once: true })
    dlg.showModal()
  })
}

/** Runs fn every ms (and once now) until the returned stop is called. */
export function every (ms, fn) {
  let stopped = false
  let timer
  const tick = async () => {
    if (stopped) return
    try { await fn() } catch (err) { console.warn(err) }
    if (!stopped) timer = setTimeout(tick, ms)
  }
  tick()
  return () => { stopped = true; clearTimeout(timer) }
}

export function bytes (n) {
  if (n === undefined || n === null) return '–'
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB']
  let i = 0
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++ }
  return `${n.toFixed(i === 0 ? 0 : 1)} ${units[i]}`
}

export function ms (seconds) {
  if (seconds === undefined || seconds === null) return '–'
  return seconds < 1 ? `${(seconds * 1000).toFixed(1)} ms` : `${seconds.toFixed(2)} s`
}

export function when (iso) {
  if (!iso) return '–'
  const d = new Date(iso)
  return isNaN(d) ? '–' : d.toLocaleString()
}

/**
 * A table whose first column heads its rows. stack lays each row out as
 * a card of labelled cells on narrow screens, for tables too wide for a
 * phone.
 */
export function table (caption, columns, rows, empty = 'Nothing here yet.', { stack = false } = {}) {
  if (!rows.length) return h('p', { class: 'empty' }, empty)
  return h('div', { class: stack ? 'table-wrap stack' : 'table-wrap' },
    h('table', {},
      h('caption', {}, caption),
      h('thead', {}, h('tr', {}, columns.map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', {}, rows.map((r) => h('tr', {}, r.map((cell, i) => i === 0
        ? h('th', { scope: 'row' }, cell)
        : h('td', { 'data-label': stack ? columns[i] : undefined }, cell)))))))
}

export function field (label, control, hint) {
  const id = control.id || `f-${Math.random().toString(36).slice(2, 9)}`
  control.id = id
  const hintEl = hint ? h('small', { id: `${id}-hint` }, hint) : null
  if (hintEl) control.setAttribute('aria-describedby', hintEl.id)
  return h('div', { class: 'field' }, h('label', { for: id }, label), control, hintEl)
}

/** A labelled value list (a <dl>). */
export function facts (pairs) {
  return h('dl', { class: 'facts' }, pairs.map(([k, v]) => [h('dt', {}, k), h('dd', {}, v ?? '–')]))
}

export function stat (label, value, detail) {
  return h('div', { class: 'stat' }, h('span', { class: 'stat-label' }, label), h('strong', { class: 'stat-value' }, value), detail ? h('span', { class: 'stat-detail' }, detail) : null)
}
