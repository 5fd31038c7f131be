// The SDK a matrix run tests. CUBE_E2E_SDK names one package of
// package.json: an npm alias of a published release (e2b-2-0 is
// "npm:e2b@2.0.1") or e2b / @e2b/code-interpreter themselves, the newest.
// The matrix's test files import the SDK from here, so the same files run
// against every release; run.mjs sets the variable for each.
//
// A test that needs what an old release lacks is skipped with the reason
// (unless(...)), which the matrix shows in that release's column.
import { createRequire } from 'node:module'

export const name = process.env.CUBE_E2E_SDK || '@e2b/code-interpreter'

const require = createRequire(import.meta.url)
const manifest = require(`${name}/package.json`)

/** The package's real name and version, e2b or @e2b/code-interpreter. */
export const pkg = manifest.name
export const version = manifest.version
export const label = `${pkg} ${version}`

const sdk = await import(name)
export default sdk
export const { Sandbox, CommandExitError, FileType, FilesystemEventType, Template } = sdk

// What a release can do, read from its API rather than from a table of
// versions, so a new release needs no change here.
const has = (obj, method) => typeof obj?.[method] === 'function'
export const can = {
  // e2b 2.0 calls it betaPause, 2.29 and later pause; 1.x has neither.
  pause: has(Sandbox.prototype, 'pause') || has(Sandbox.prototype, 'betaPause'),
  snapshots: has(Sandbox.prototype, 'createSnapshot'),
  fork: has(Sandbox.prototype, 'fork'),
  template: has(Template, 'build'),
  runCode: has(Sandbox.prototype, 'runCode'),
  // @e2b/code-interpreter 1.x sends no access token with runCode: it
  // worked with E2B's sandboxes made without `secure`, which have none,
  // while every Cube sandbox has one (as E2B's secure ones, where 1.x
  // fails alike). Not visible in its API, hence the version.
  runCodeToken: has(Sandbox.prototype, 'runCode') && !(pkg === '@e2b/code-interpreter' && /^[01]\./.test(version)),
  contexts: has(Sandbox.prototype, 'listCodeContexts'),
}

/**
 * A test option: skip, naming what this release lacks, unless it has it.
 * `test(name, { skip: unless(can.fork, 'fork') }, fn)`.
 */
export function unless(ok, what) {
  return ok ? false : `${label} has no ${what}`
}

/** Pauses the sandbox with whichever method the release has. */
export function pause(sbx) {
  return has(sbx, 'pause') ? sbx.pause() : sbx.betaPause()
}

/**
 * Sandboxes matching query, every page: e2b 1.x answers list() with an
 * array, 2.x with a paginator.
 */
export async function listSandboxes(opts) {
  const listed = Sandbox.list(opts)
  if (!has(listed, 'nextItems')) return await listed
  const all = []
  while (listed.hasNext) all.push(...await listed.nextItems())
  return all
}
