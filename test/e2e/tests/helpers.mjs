// Shared plumbing for the end-to-end tests. The SDKs read E2B_API_URL,
// E2B_SANDBOX_URL and E2B_API_KEY themselves; the tests only read them to
// make the few plain HTTP calls an SDK has no method for.
import assert from 'node:assert/strict'
import http from 'node:http'
import https from 'node:https'
import { randomBytes } from 'node:crypto'

// The suite runs twice (scripts/e2e.sh): with E2B_API_URL and
// E2B_SANDBOX_URL over plain HTTP, and with only E2B_DOMAIN over HTTPS.
export const mode = process.env.CUBE_E2E_MODE ?? 'header'
const needed = mode === 'https' ? ['E2B_DOMAIN', 'E2B_API_KEY'] : ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_API_KEY']
for (const name of needed) {
  assert.ok(process.env[name], `${name} must be set (run the suite with scripts/e2e.sh)`)
}

export const apiUrl = (process.env.E2B_API_URL ?? `https://api.${process.env.E2B_DOMAIN}`).replace(/\/$/, '')
export const apiKey = process.env.E2B_API_KEY
// The PEM of Cube's local CA, which the HTTPS listener's certificates chain to.
export const caFile = process.env.CUBE_E2E_CA

// A short random tag that keeps one run's metadata and names apart from
// any other run against the same server.
export const runTag = randomBytes(4).toString('hex')

/**
 * Sandboxes a test file created; killAll() (in an after hook) removes
 * whatever a failing test left behind.
 */
export class Tracker {
  constructor() { this.ids = new Set() }
  add(sbx) { this.ids.add(sbx.sandboxId); return sbx }
  async killAll(SandboxClass) {
    await Promise.all([...this.ids].map((id) => SandboxClass.kill(id).catch(() => {})))
    this.ids.clear()
  }
}

/** One control-plane call with the run's key; returns status, headers and the parsed body. */
export async function api(method, path, body, { key = apiKey } = {}) {
  const res = await fetch(apiUrl + path, {
    method,
    headers: { 'X-API-Key': key, ...(body !== undefined && { 'Content-Type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  const text = await res.text()
  let json
  try { json = text ? JSON.parse(text) : undefined } catch { json = undefined }
  return { status: res.status, headers: res.headers, text, json }
}

/**
 * A request through the cube-server listener the suite uses (HTTP, or
 * HTTPS with the name of the API as TLS server name) with any headers,
 * Host included (fetch will not let a caller set Host).
 */
export function rawRequest(path, { method = 'GET', headers = {}, body } = {}) {
  const url = new URL(apiUrl)
  const client = url.protocol === 'https:' ? https : http
  return new Promise((resolve, reject) => {
    const req = client.request({
      // A connection of its own: a raw request never meets a pooled
      // connection that the server has closed meanwhile.
      host: url.hostname, port: url.port, path, method, headers, servername: url.hostname, agent: false,
    }, (res) => {
      const chunks = []
      res.on('data', (c) => chunks.push(c))
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) }))
      res.on('error', reject)
    })
    req.on('error', reject)
    req.end(body)
  })
}

/**
 * Polls fn until it returns a truthy value. The deadline only stops a test
 * that would otherwise hang; it is generous so a slow machine still passes.
 * what names the awaited thing in the failure (a function is called then,
 * to describe what had been seen).
 */
export async function eventually(fn, { what = 'condition', timeoutMs = 30_000, intervalMs = 250 } = {}) {
  const deadline = Date.now() + timeoutMs
  let last
  for (;;) {
    try {
      const v = await fn()
      if (v) return v
    } catch (err) {
      last = err
    }
    if (Date.now() > deadline) {
      const name = typeof what === 'function' ? what() : what
      throw new Error(`gave up waiting for ${name}${last ? `: last error: ${last.message}` : ''}`)
    }
    await new Promise((r) => setTimeout(r, intervalMs))
  }
}

/** Asserts that promise rejects and returns the error for further checks. */
export async function rejection(promise) {
  try {
    await promise
  } catch (err) {
    return err
  }
  assert.fail('expected the call to fail, it succeeded')
}

/** A key of the right shape that the server never issued. */
export const wrongKey = 'e2b_' + '0'.repeat(40)

export const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])
