// The API key lives in sessionStorage only: it goes with the tab, and is
// sent as X-API-Key on every call. Sign-out removes it.
const KEY = 'cube.apiKey'

export const session = {
  get key () { return sessionStorage.getItem(KEY) || '' },
  set (key) { sessionStorage.setItem(KEY, key) },
  clear () { sessionStorage.removeItem(KEY) },
}

/** An error answer of the API, in E2B's shape {code, message}. */
export class ApiError extends Error {
  constructor (status, message) {
    super(message)
    this.status = status
  }
}

let onUnauthorized = () => {}
/** Registers what happens when the server refuses the key (401). */
export function whenUnauthorized (fn) { onUnauthorized = fn }

/**
 * Calls the API with the session's key. Resolves to {body, headers};
 * rejects with ApiError carrying the server's message. team, for an admin
 * key, is the team the call acts for (X-Team-ID).
 */
export async function call (method, path, body, { raw = false, contentType, team } = {}) {
  const headers = { 'X-API-Key': session.key }
  if (team) headers['X-Team-ID'] = team
  let payload
  if (body !== undefined) {
    if (raw) {
      payload = body
      headers['Content-Type'] = contentType || 'application/octet-stream'
    } else {
      payload = JSON.stringify(body)
      headers['Content-Type'] = 'application/json'
    }
  }
  let res
  try {
    res = await fetch(path, { method, headers, body: payload, cache: 'no-store' })
  } catch (err) {
    throw new ApiError(0, `the server did not answer (${err.message})`)
  }
  const text = await res.text()
  let json
  try { json = text ? JSON.parse(text) : undefined } catch { json = undefined }
  if (!res.ok) {
    const message = (json && json.message) || text || res.statusText
    if (res.status === 401) onUnauthorized(message)
    throw new ApiError(res.status, message)
  }
  return { body: json, headers: res.headers }
}

export const get = async (path) => (await call('GET', path)).body
export const post = async (path, body) => (await call('POST', path, body ?? {})).body
export const del = async (path) => (await call('DELETE', path)).body
export const put = async (path, body) => (await call('PUT', path, body ?? {})).body

export const enc = encodeURIComponent
