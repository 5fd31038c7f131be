// Snapshots: the list, a sandbox started from one, and deletion.
import { get, post, del, enc } from '../api.js'
import { h, fill, errorBox, when, bytes, table, confirmAction, notify } from '../ui.js'

export function render (root) {
  const list = h('div', { 'aria-live': 'polite' })
  const problem = h('div')
  fill(root, h('h1', {}, 'Snapshots'), problem, list)
  async function load () {
    let snaps
    try {
      snaps = await get('/snapshots')
    } catch (err) {
      fill(list, errorBox(err))
      return
    }
    fill(list, table('Snapshots', ['Snapshot', 'Names', 'From sandbox', 'Taken', 'Size', 'Actions'],
      (snaps || []).map((s) => [
        s.snapshotID, (s.names || []).join(', ') || '–', s.sandboxID || '–', when(s.createdAt), s.sizeBytes ? bytes(s.sizeBytes) : '–',
        h('span', { class: 'actions' },
          h('button', {
            type: 'button',
            class: 'secondary',
            onclick: async () => {
              if (!await confirmAction(`Start a new sandbox from snapshot ${s.snapshotID}?`, { ok: 'Create sandbox' })) return
              try {
                const sbx = await post('/sandboxes', { templateID: s.snapshotID })
                location.hash = `#/sandboxes/${sbx.sandboxID}`
              } catch (err) { fill(problem, errorBox(err)) }
            },
          }, 'Create sandbox'),
          h('button', {
            type: 'button',
            class: 'danger',
            onclick: async () => {
              if (!await confirmAction(`Delete snapshot ${s.snapshotID}? Sandboxes already started from it keep running.`, { ok: 'Delete', danger: true })) return
              try {
                await del(`/templates/${enc(s.snapshotID)}`)
                notify(`Deleted snapshot ${s.snapshotID}`)
              } catch (err) { fill(problem, errorBox(err)) }
              load()
            },
          }, 'Delete')),
      ]), 'No snapshot yet: take one from a running sandbox\'s page.'))
  }
  load()
}
