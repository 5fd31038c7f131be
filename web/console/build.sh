#!/usr/bin/env bash
# Regenerates the console's bundle in internal/webui/dist from this
# directory's sources (make console-assets). Pinned versions, lockfile,
# no source maps and no dates: the same sources give the same bytes.
set -euo pipefail
cd "$(dirname "$0")"
out=../../internal/webui/dist
npm ci --no-audit --no-fund --silent
mkdir -p "$out"
npx esbuild src/main.js --bundle --format=esm --minify --target=es2020 --legal-comments=none --log-level=warning --outfile="$out/app.js"
npx esbuild src/app.css --bundle --minify --legal-comments=none --log-level=warning --outfile="$out/app.css"
cp index.html "$out/index.html"
cp ../../docs/BENCHMARKS.md "$out/benchmarks.md"
# What the bundle was made from; internal/webui's tests fail when a source
# changes without the bundle being made again.
find index.html package.json package-lock.json src -type f | LC_ALL=C sort | xargs sha256sum >"$out/sources.sha256"
