// A node:test reporter for run.mjs: one JSON line per finished test (file,
// name, pass, fail or skip with its reason, the error's first lines).
export default async function* matrixReporter(source) {
  for await (const event of source) {
    if (event.type !== 'test:pass' && event.type !== 'test:fail') continue
    const { name, file, nesting, skip, details } = event.data
    if (nesting !== 0 || details?.type === 'suite') continue
    let status = event.type === 'test:pass' ? 'pass' : 'fail'
    if (skip !== undefined && skip !== false) status = 'skip'
    const line = { file, name, status }
    if (status === 'skip' && typeof skip === 'string') line.reason = skip
    if (status === 'fail') {
      const err = details?.error
      const cause = err?.cause ?? err
      line.error = String(cause?.message ?? cause ?? 'failed').split('\n').slice(0, 3).join(' ').slice(0, 300)
    }
    yield JSON.stringify(line) + '\n'
  }
}
