// The SDK version matrix: the matrix's test files run once per published
// release of the JS SDKs that package.json pins, each time with the
// release named by CUBE_E2E_SDK (sdk.mjs), against the server the
// environment names (scripts/e2e.sh runs this over HTTPS, which every
// release can reach). A release is a column:
//
//   - every dependency named e2b-<version> or code-interpreter-<version>
//     (an npm alias, "e2b-2-0": "npm:e2b@2.0.1"), and e2b and
//     @e2b/code-interpreter themselves, the newest;
//   - e2b releases run FILES.e2b, @e2b/code-interpreter releases
//     FILES['@e2b/code-interpreter'] (the rest they take from the e2b they
//     depend on, which has a column of its own).
//
// Adding a release is one line in package.json (and `npm install`).
// CUBE_E2E_MATRIX=alias,alias runs only those columns, =none none. At the
// end it prints the matrix (a row per test, a column per release: pass,
// FAIL with the error, or skipped with what the release lacks), also
// written to artifacts/matrix.md, and exits 1 if any cell failed.
import { spawn } from 'node:child_process'
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { tmpdir } from 'node:os'
import { dirname, join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'

const here = dirname(fileURLToPath(import.meta.url))
const e2e = join(here, '..')
const require = createRequire(join(e2e, 'package.json'))

const FILES = {
  e2b: ['sandbox', 'process', 'files', 'snapshots', 'template'],
  '@e2b/code-interpreter': ['code'],
}
const COLUMN = /^(e2b|@e2b\/code-interpreter|(e2b|code-interpreter)-\d[\d-]*)$/

function compareVersions(a, b) {
  const pa = a.split(/[.-]/).map(Number)
  const pb = b.split(/[.-]/).map(Number)
  for (let i = 0; i < Math.max(pa.length, pb.length); i++) {
    if ((pa[i] ?? 0) !== (pb[i] ?? 0)) return (pa[i] ?? 0) - (pb[i] ?? 0)
  }
  return 0
}

const deps = JSON.parse(readFileSync(join(e2e, 'package.json'), 'utf8')).dependencies
let columns = Object.keys(deps).filter((alias) => COLUMN.test(alias)).map((alias) => {
  const { name, version } = require(`${alias}/package.json`)
  return { alias, pkg: name, version, label: `${name} ${version}` }
}).sort((a, b) => Object.keys(FILES).indexOf(a.pkg) - Object.keys(FILES).indexOf(b.pkg) || compareVersions(a.version, b.version))
if (process.env.CUBE_E2E_MATRIX === 'none') {
  columns = []
} else if (process.env.CUBE_E2E_MATRIX) {
  const only = process.env.CUBE_E2E_MATRIX.split(',').map((s) => s.trim())
  const unknown = only.filter((a) => !columns.some((c) => c.alias === a))
  if (unknown.length) {
    console.error(`matrix: no release ${unknown.join(', ')} in package.json (${columns.map((c) => c.alias).join(', ')})`)
    process.exit(2)
  }
  columns = columns.filter((c) => only.includes(c.alias))
}

function runColumn(col, out) {
  const files = FILES[col.pkg].map((f) => join(here, `${f}.test.mjs`))
  const args = [
    '--test', '--test-concurrency=2', '--test-timeout=300000',
    '--test-reporter=spec', '--test-reporter-destination=stdout',
    `--test-reporter=${join(here, 'reporter.mjs')}`, `--test-reporter-destination=${out}`,
    ...files,
  ]
  return new Promise((resolve) => {
    const child = spawn(process.execPath, args, { cwd: e2e, stdio: 'inherit', env: { ...process.env, CUBE_E2E_SDK: col.alias } })
    child.on('exit', (code, signal) => resolve(signal ? 128 : code))
  })
}

const scratch = mkdtempSync(join(tmpdir(), 'cube-matrix-'))
const rows = new Map() // "file\0name" → { file, name, cells: { alias: cell } }
let failed = false
const started = Date.now()
try {
  for (const col of columns) {
    const t0 = Date.now()
    console.log(`\nmatrix: ${col.label} (${col.alias})`)
    const out = join(scratch, `${col.alias.replace(/\W/g, '_')}.jsonl`)
    const code = await runColumn(col, out)
    let seen = 0
    for (const line of readFileSync(out, 'utf8').split('\n').filter(Boolean)) {
      const r = JSON.parse(line)
      const file = relative(here, r.file ?? '')
      const key = `${file}\0${r.name}`
      if (!rows.has(key)) rows.set(key, { file, name: r.name, cells: {} })
      rows.get(key).cells[col.alias] = r
      seen++
      if (r.status === 'fail') failed = true
    }
    if (code !== 0 && !readFileSync(out, 'utf8').includes('"fail"')) {
      // The run failed outside any test (a file that did not load).
      failed = true
      const key = `\0(the run)`
      if (!rows.has(key)) rows.set(key, { file: '', name: '(the run)', cells: {} })
      rows.get(key).cells[col.alias] = { status: 'fail', error: `node --test exited with ${code}` }
    }
    console.log(`matrix: ${col.label}: ${seen} tests in ${Math.round((Date.now() - t0) / 1000)} s`)
  }
} finally {
  rmSync(scratch, { recursive: true, force: true })
}

const order = Object.values(FILES).flat()
const sorted = [...rows.values()].sort((a, b) => order.indexOf(a.file.replace(/\.test\.mjs$/, '')) - order.indexOf(b.file.replace(/\.test\.mjs$/, '')))
const cell = (r) => {
  if (!r) return 'n/a'
  if (r.status === 'pass') return 'pass'
  if (r.status === 'skip') return `skipped: ${r.reason ?? ''}`.trim()
  return `FAIL: ${r.error}`
}
const md = [
  `| test | ${columns.map((c) => c.label).join(' | ')} |`,
  `|---|${columns.map(() => '---').join('|')}|`,
  ...sorted.map((r) => `| ${r.name.replaceAll('|', '\\|')} | ${columns.map((c) => cell(r.cells[c.alias]).replaceAll('|', '\\|')).join(' | ')} |`),
].join('\n')
mkdirSync(join(e2e, 'artifacts'), { recursive: true })
writeFileSync(join(e2e, 'artifacts', 'matrix.md'), md + '\n')
console.log(`\nmatrix: ${columns.length} releases in ${Math.round((Date.now() - started) / 1000)} s (artifacts/matrix.md)\n${md}`)
process.exit(failed ? 1 : 0)
