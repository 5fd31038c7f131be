'use strict'
// Cube's JavaScript/TypeScript cell driver, run by cube_kernels (_node.py)
// as `node driver.js javascript|typescript REQUEST_FD REPLY_FD`.
//
// Cells arrive as JSON lines ({code, silent}) on REQUEST_FD; for each, the
// driver writes JSON lines to REPLY_FD: at most one {type: "result", text}
// or {type: "error", ename, evalue, traceback}, then {type: "done"}. Output
// of the cell goes to this process's stdout and stderr, which the kernel
// forwards; stdout and stderr are pipes, written synchronously, so all of a
// cell's output is in them before its "done".
//
// Cells run in this process's global context with REPL semantics:
//  - top-level declarations (var, let, const, function, class, imports)
//    become globals, so later cells see them and may declare them again;
//  - the value of a last expression statement is the result (util.inspect);
//  - top-level await works: a cell runs as the body of an async function;
//  - static imports (import x from 'm', import { a as b } from 'm',
//    import * as ns from 'm') and import() load through dynamic import,
//    resolved from the working directory first; require is available too.
// The cell is rewritten on the syntax tree of the typescript package's
// parser; TypeScript cells are transpiled with transpileModule first.

const fs = require('fs')
const path = require('path')
const util = require('util')
const vm = require('vm')
const Module = require('module')
const { pathToFileURL } = require('url')

const mode = process.argv[2] === 'typescript' ? 'typescript' : 'javascript'
const reqFd = Number(process.argv[3])
const repFd = Number(process.argv[4])

let ts = null
function typescript () {
  if (ts) return ts
  const paths = [process.cwd(), '/usr/local/lib/node_modules', '/usr/lib/node_modules', '/usr/share/nodejs']
  if (process.env.NODE_PATH) paths.unshift(...process.env.NODE_PATH.split(path.delimiter).filter(Boolean))
  ts = require(require.resolve('typescript', { paths }))
  return ts
}

// The user's require and import resolve from the working directory.
const userRequire = Module.createRequire(path.join(process.cwd(), '[cell]'))
globalThis.require = userRequire

function isBuiltin (spec) {
  if (spec.startsWith('node:')) return true
  return typeof Module.isBuiltin === 'function' ? Module.isBuiltin(spec) : Module.builtinModules.includes(spec)
}

async function cubeImport (spec) {
  spec = String(spec)
  if (isBuiltin(spec) || /^(file|data):/.test(spec)) return import(spec)
  let target
  try {
    target = pathToFileURL(userRequire.resolve(spec)).href
  } catch (e) {
    target = spec
  }
  return import(target)
}
Object.defineProperty(globalThis, '__cube_import', { value: cubeImport, enumerable: false, configurable: true, writable: true })

function applyEdits (text, edits) {
  edits.sort((a, b) => b[0] - a[0])
  for (const [start, end, repl] of edits) text = text.slice(0, start) + repl + text.slice(end)
  return text
}

function parse (code) {
  const T = typescript()
  return T.createSourceFile('cell.js', code, T.ScriptTarget.Latest, true, T.ScriptKind.JS)
}

function boundNames (T, name, out) {
  if (T.isIdentifier(name)) {
    out.push(name.text)
  } else if (T.isObjectBindingPattern(name) || T.isArrayBindingPattern(name)) {
    for (const el of name.elements) if (!T.isOmittedExpression(el)) boundNames(T, el.name, out)
  }
  return out
}

let tmpCount = 0

// rewrite turns a JavaScript cell into {hoisted: names to declare as global
// vars, body: the body of the async function that runs the cell}.
function rewrite (code) {
  const T = typescript()
  // 1. import(x) becomes __cube_import(x): a vm script has no module loader.
  let sf = parse(code)
  const dyn = []
  const visit = (n) => {
    if (T.isCallExpression(n) && n.expression.kind === T.SyntaxKind.ImportKeyword) {
      dyn.push([n.expression.getStart(sf), n.expression.end, '__cube_import'])
    }
    T.forEachChild(n, visit)
  }
  visit(sf)
  if (dyn.length) {
    code = applyEdits(code, dyn)
    sf = parse(code)
  }

  // A cell that does not parse is reported as V8 words it, or else (top-level
  // await or import, which a script cannot have) as the parser does.
  if (sf.parseDiagnostics && sf.parseDiagnostics.length) {
    try {
      new vm.Script(code, { filename: `<cell ${cellCount}>` })
    } catch (e) {
      if (e instanceof SyntaxError && !/await|import/.test(e.message)) throw e
    }
    const d = sf.parseDiagnostics[0]
    const { line, character } = sf.getLineAndCharacterOfPosition(d.start)
    const e = new SyntaxError(T.flattenDiagnosticMessageText(d.messageText, '\n'))
    e.stack = `<cell ${cellCount}>:${line + 1}:${character + 1}\nSyntaxError: ${e.message}`
    throw e
  }

  // 2. Top-level declarations become assignments to globals.
  const hoisted = []
  const prologue = []
  const edits = []
  const stmts = sf.statements
  let last = stmts.length - 1
  while (last >= 0 && (T.isEmptyStatement(stmts[last]) || (T.isExportDeclaration(stmts[last]) && !stmts[last].moduleSpecifier))) last--
  const text = (n) => code.slice(n.getStart(sf), n.end)
  const declText = (st) => {
    const mods = (st.modifiers || []).filter((m) => m.kind !== T.SyntaxKind.ExportKeyword && m.kind !== T.SyntaxKind.DefaultKeyword)
    const rest = code.slice(st.modifiers && st.modifiers.length ? st.modifiers.end : st.getStart(sf), st.end).trimStart()
    return mods.map((m) => m.getText(sf)).concat(rest).join(' ')
  }
  stmts.forEach((st, i) => {
    const replace = (repl) => edits.push([st.getStart(sf), st.end, repl])
    if (T.isImportDeclaration(st)) {
      const spec = text(st.moduleSpecifier)
      const clause = st.importClause
      if (!clause) return replace(`await __cube_import(${spec});`)
      if (clause.isTypeOnly) return replace('')
      const tmp = `__cube_m${tmpCount++}`
      const parts = [`const ${tmp} = await __cube_import(${spec});`]
      if (clause.name) {
        hoisted.push(clause.name.text)
        parts.push(`${clause.name.text} = ('default' in ${tmp}) ? ${tmp}.default : ${tmp};`)
      }
      const nb = clause.namedBindings
      if (nb && T.isNamespaceImport(nb)) {
        hoisted.push(nb.name.text)
        parts.push(`${nb.name.text} = ${tmp};`)
      } else if (nb && T.isNamedImports(nb)) {
        for (const el of nb.elements) {
          if (el.isTypeOnly) continue
          const imported = (el.propertyName || el.name).text
          hoisted.push(el.name.text)
          parts.push(`${el.name.text} = ${tmp}[${JSON.stringify(imported)}];`)
        }
      }
      return replace(parts.join(' '))
    }
    if (T.isVariableStatement(st)) {
      const isVar = !(st.declarationList.flags & (T.NodeFlags.Let | T.NodeFlags.Const))
      const parts = []
      for (const d of st.declarationList.declarations) {
        boundNames(T, d.name, hoisted)
        if (d.initializer) {
          const target = text(d.name)
          parts.push(T.isIdentifier(d.name) ? `${target} = ${text(d.initializer)};` : `(${target} = ${text(d.initializer)});`)
        } else if (!isVar && T.isIdentifier(d.name)) {
          parts.push(`${d.name.text} = undefined;`)
        }
      }
      return replace(parts.join(' '))
    }
    if (T.isFunctionDeclaration(st) && st.name && st.body) {
      hoisted.push(st.name.text)
      prologue.push(`globalThis[${JSON.stringify(st.name.text)}] = ${st.name.text};`)
      return replace(declText(st))
    }
    if (T.isClassDeclaration(st) && st.name) {
      hoisted.push(st.name.text)
      return replace(`${st.name.text} = ${declText(st)};`)
    }
    if (T.isExportDeclaration(st)) return replace('')
    if (T.isExportAssignment(st)) {
      return replace(i === last ? `return { value: (${text(st.expression)}) };` : `${text(st.expression)};`)
    }
    if (i === last && T.isExpressionStatement(st)) {
      return replace(`return { value: (${text(st.expression)}) };`)
    }
  })
  return { hoisted, body: prologue.join(' ') + applyEdits(code, edits) }
}

class CellSyntaxError extends SyntaxError {}

function transpile (code) {
  const T = typescript()
  const out = T.transpileModule(code, {
    fileName: 'cell.ts',
    reportDiagnostics: true,
    compilerOptions: {
      target: T.ScriptTarget.ES2022,
      module: T.ModuleKind.ESNext,
      moduleDetection: T.ModuleDetectionKind.Force,
      // Keep every import: a cell may import for a later cell.
      verbatimModuleSyntax: true,
      sourceMap: false,
    },
  })
  const diags = (out.diagnostics || []).filter((d) => d.category === T.DiagnosticCategory.Error)
  if (diags.length) {
    const lines = diags.map((d) => {
      const msg = T.flattenDiagnosticMessageText(d.messageText, '\n')
      if (d.file && d.start !== undefined) {
        const { line, character } = d.file.getLineAndCharacterOfPosition(d.start)
        return `cell.ts(${line + 1},${character + 1}): error TS${d.code}: ${msg}`
      }
      return `error TS${d.code}: ${msg}`
    })
    const e = new CellSyntaxError(T.flattenDiagnosticMessageText(diags[0].messageText, '\n'))
    e.name = 'SyntaxError'
    e.stack = lines.join('\n')
    throw e
  }
  return out.outputText
}

let cellCount = 0
let wrapperFrame = '\0' // the stack frame of the wrapper's call, left out of tracebacks
let interrupt = null
process.on('SIGINT', () => { if (interrupt) interrupt() })

async function runCell (code) {
  cellCount++
  if (mode === 'typescript') code = transpile(code)
  const { hoisted, body } = rewrite(code)
  const names = [...new Set(hoisted)].filter((n) => !(n in globalThis) || Object.getOwnPropertyDescriptor(globalThis, n) === undefined)
  if (names.length) vm.runInThisContext(`var ${names.join(', ')};`)
  const filename = `<cell ${cellCount}>`
  wrapperFrame = `${filename}:${body.split('\n').length + 1}:`
  // Same first line as the cell, so error positions match its lines.
  const script = new vm.Script(`(async function () { ${body}\n}).call(globalThis)`, { filename })
  const interrupted = new Promise((resolve, reject) => {
    interrupt = () => {
      const e = new Error('Script execution was interrupted')
      e.name = 'KeyboardInterrupt'
      reject(e)
    }
  })
  try {
    const promise = script.runInThisContext({ breakOnSigint: true })
    const r = await Promise.race([promise, interrupted])
    return r === undefined ? undefined : r
  } finally {
    interrupt = null
  }
}

function send (msg) {
  const data = Buffer.from(JSON.stringify(msg) + '\n')
  let off = 0
  while (off < data.length) {
    try {
      off += fs.writeSync(repFd, data, off)
    } catch (e) {
      if (e.code !== 'EAGAIN') throw e
    }
  }
}

function errorMessage (e) {
  if (util.types.isNativeError(e) || e instanceof Error) {
    const ename = e.name || 'Error'
    const evalue = e.message === undefined ? '' : String(e.message)
    const stack = String(e.stack || `${ename}: ${evalue}`)
      .split('\n')
      .filter((l) => !l.includes(__filename) && !/\(node:|at node:|sigintHandlersWrap/.test(l) && !l.includes(wrapperFrame))
    return { type: 'error', ename, evalue, traceback: stack }
  }
  const evalue = util.inspect(e)
  return { type: 'error', ename: 'Error', evalue, traceback: [`Uncaught ${evalue}`] }
}

function report (what) {
  return (e) => {
    try {
      process.stderr.write(`${what}: ${util.types.isNativeError(e) ? e.stack : util.inspect(e)}\n`)
    } catch (_) {}
  }
}
process.on('uncaughtException', report('Uncaught exception'))
process.on('unhandledRejection', report('Unhandled promise rejection'))

async function handle (line) {
  let req
  try {
    req = JSON.parse(line)
  } catch (e) {
    send({ type: 'error', ename: 'Error', evalue: 'bad request to the driver', traceback: [] })
    send({ type: 'done' })
    return
  }
  try {
    const r = await runCell(req.code)
    if (r && r.value !== undefined) send({ type: 'result', text: util.inspect(r.value) })
  } catch (e) {
    send(errorMessage(e))
  }
  send({ type: 'done' })
}

// Requests are handled one at a time, in order.
let queue = Promise.resolve()
let buffered = ''
const requests = fs.createReadStream(null, { fd: reqFd, encoding: 'utf8' })
requests.on('data', (chunk) => {
  buffered += chunk
  let i
  while ((i = buffered.indexOf('\n')) >= 0) {
    const line = buffered.slice(0, i)
    buffered = buffered.slice(i + 1)
    if (line.trim()) queue = queue.then(() => handle(line))
  }
})
requests.on('end', () => queue.then(() => process.exit(0)))
requests.on('error', () => process.exit(0))
