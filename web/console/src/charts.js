// Live line charts over time, drawn by uPlot. Each chart keeps its last
// MAX_POINTS samples; pages push a sample at every poll. The latest
// values are also written out as text, for screen readers and for
// anyone who wants the number rather than the line.
import uPlot from 'uplot'
import { h } from './ui.js'

const MAX_POINTS = 180
const COLORS = ['#2563eb', '#dc2626', '#16a34a', '#9333ea', '#ea580c']
// The shortest time an x axis spans, in seconds. Samples that span less
// (one sample, or several at one instant) are shown in the middle of a
// window this wide; left to uPlot, a single sample's axis spans a
// thousand days and is labelled with years.
export const MIN_SPAN_S = 120
// Tick spacings of a count's axis: never a fraction.
const WHOLE_INCRS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000]

export class TimeChart {
  /**
   * title names the chart; series are {label}; format turns a value into
   * text (axis and legend); range, when given, fixes the y axis [min, max];
   * whole puts the y axis's ticks on whole numbers only (for counts).
   */
  constructor (title, series, { format = (v) => String(v), range, whole = false } = {}) {
    this.format = format
    this.series = series
    this.data = [[], ...series.map(() => [])]
    this.plot = h('div', { class: 'plot', role: 'img', 'aria-label': `${title}: no samples yet` })
    this.latest = h('p', { class: 'latest' }, 'waiting for the first sample…')
    this.el = h('figure', { class: 'chart', 'data-points': '0' }, h('figcaption', {}, title), this.plot, this.latest)
    this.title = title
    const fmt = (u, v) => v === null || v === undefined ? '–' : format(v)
    this.u = new uPlot({
      width: 320,
      height: 170,
      legend: { show: false },
      cursor: { drag: { x: false, y: false } },
      scales: { x: { time: true }, y: range ? { range } : { range: (u, min, max) => [Math.min(0, min), max > 0 ? max * 1.1 : 1] } },
      axes: [
        { space: 70, values: (u, splits, axis, space, incr) => this.labelled(timeLabels(splits, incr)) },
        { values: (u, vals) => vals.map((v) => fmt(u, v)), size: 84, incrs: whole ? WHOLE_INCRS : undefined },
      ],
      series: [{}, ...series.map((s, i) => ({ label: s.label, stroke: COLORS[i % COLORS.length], width: 2, value: fmt }))],
    }, this.data, this.plot)
    this.resizer = new ResizeObserver(() => requestAnimationFrame(() => this.fit()))
    this.resizer.observe(this.el)
  }

  fit () {
    const w = Math.floor(this.el.clientWidth)
    if (w > 0 && w !== this.u.width) this.u.setSize({ width: w, height: 170 })
  }

  /** Adds a sample at time t (Unix seconds); values are one per series. */
  push (t, values) {
    this.data[0].push(t)
    values.forEach((v, i) => this.data[i + 1].push(v ?? null))
    if (this.data[0].length > MAX_POINTS) this.data.forEach((col) => col.shift())
    this.draw(values)
  }

  /**
   * Shows a whole series instead of the samples pushed: times (Unix
   * seconds, ascending) and, per series, a column of values as long.
   */
  set (times, columns) {
    this.data = [times.slice(), ...columns.map((col) => col.map((v) => v ?? null))]
    this.draw(columns.map((col) => col[col.length - 1]))
  }

  draw (values) {
    // The x axis is set here rather than by uPlot, which spans a single
    // sample's axis over years (see timeWindow).
    this.el.dataset.xLabels = ''
    this.u.setData(this.data, false)
    this.el.dataset.points = String(this.data[0].length)
    const [min, max] = timeWindow(this.data[0])
    if (min === null) {
      this.latest.textContent = 'no samples'
      this.plot.setAttribute('aria-label', `${this.title}: no samples`)
      return
    }
    this.u.setScale('x', { min, max })
    const text = this.series.map((s, i) => `${s.label} ${values[i] === null || values[i] === undefined ? '–' : this.format(values[i])}`).join(' · ')
    this.latest.textContent = text
    const at = (t) => new Date(t * 1000).toLocaleString()
    this.plot.setAttribute('aria-label', `${this.title}, ${at(min)} to ${at(max)}, latest: ${text}`)
  }

  /** Notes the x axis's labels as drawn (data-x-labels), and returns them. */
  labelled (labels) {
    this.el.dataset.xLabels = labels.join(' | ')
    return labels
  }

  destroy () {
    this.resizer.disconnect()
    this.u.destroy()
  }
}

/**
 * The q-quantile of the observations between two cumulative histograms
 * (Prometheus buckets: counts at or below each bound), interpolated
 * within the bucket as histogram_quantile does. Null when nothing was
 * observed in between.
 */
export function windowQuantile (prev, cur, q) {
  if (!cur || !cur.bounds || !cur.bounds.length) return null
  const buckets = cur.buckets.map((c, i) => c - (prev && prev.buckets ? prev.buckets[i] || 0 : 0))
  const count = cur.count - (prev ? prev.count : 0)
  if (count <= 0) return null
  const rank = q * count
  let lower = 0
  let below = 0
  for (let i = 0; i < cur.bounds.length; i++) {
    if (buckets[i] >= rank) {
      const inBucket = buckets[i] - below
      return inBucket > 0 ? lower + (cur.bounds[i] - lower) * (rank - below) / inBucket : cur.bounds[i]
    }
    lower = cur.bounds[i]
    below = buckets[i]
  }
  return cur.bounds[cur.bounds.length - 1]
}

/**
 * The x range [min, max], in Unix seconds, of a chart whose samples are at
 * times (ascending): their span, or a window of minSpan seconds centred on
 * them when they span less (a single sample sits in the middle of it).
 * [null, null] without samples.
 */
export function timeWindow (times, minSpan = MIN_SPAN_S) {
  if (!times.length) return [null, null]
  const first = times[0]
  const last = times[times.length - 1]
  if (last - first >= minSpan) return [first, last]
  const mid = (first + last) / 2
  return [mid - minSpan / 2, mid + minSpan / 2]
}

/**
 * The labels of an x axis's ticks (Unix seconds) incr seconds apart: the
 * time of day, with seconds when the ticks are less than a minute apart;
 * the day and month when they are a day or more apart. Never a year: a
 * chart shows minutes or hours, not years. opts go to Intl.DateTimeFormat
 * (a timeZone, for tests).
 */
export function timeLabels (splits, incr, { locale, ...opts } = {}) {
  const parts = incr >= 86400
    ? { month: 'short', day: 'numeric' }
    : incr < 60 ? { hour: '2-digit', minute: '2-digit', second: '2-digit' } : { hour: '2-digit', minute: '2-digit' }
  const f = new Intl.DateTimeFormat(locale, { ...parts, ...opts })
  return splits.map((t) => t === null || t === undefined ? '' : f.format(new Date(t * 1000)))
}
