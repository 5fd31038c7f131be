#!/usr/bin/env bash
# End-to-end suite: the official E2B JS SDKs, unchanged, against a real
# cube-server running real gVisor sandboxes. It builds nothing (run
# `make build` first) and needs root.
#
# It starts a private cube-server (fresh data dir, its own port, slot
# prefix and host range, so it never meets another server on this machine),
# registers the default template, runs `node --test` in test/e2e twice
# (E2B_API_URL and E2B_SANDBOX_URL over HTTP, then only E2B_DOMAIN over
# HTTPS with Cube's CA trusted), and on any exit kills
# every sandbox it made, stops the server and removes the data dir.
# The exit code is the tests' result.
#
# Arguments are passed to `node --test` (for example a single file:
# scripts/e2e.sh tests/files.test.mjs). CUBE_E2E_SERVER_ARGS adds flags to
# cube-server (for example --debug); CUBE_E2E_KEEP=1 keeps the data dir and
# the server log for a post-mortem (sandboxes are still killed).
# CUBE_E2E_SCRIPT=FILE runs `node FILE ARGS...` in test/e2e, with each mode's
# environment, instead of the test files (scripts/stress.sh runs its burst so).
# A whole run ends with the SDK version matrix (test/e2e/README.md).
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
# The SDKs see only what this script sets: the caller's E2B_* and CUBE_*
# variables (E2B_API_KEY, E2B_DOMAIN...) are dropped, except this script's
# own CUBE_E2E_* knobs.
for v in $(compgen -e); do
	case "$v" in CUBE_E2E_*) ;; E2B_* | CUBE_*) unset "$v" ;; esac
done
cd "$root"

die() { echo "e2e: $*" >&2; exit 2; }
[ "$(id -u)" = 0 ] || die "needs root (cube-server creates network namespaces and runs gVisor)"
for b in cube-server cubemastercli cube-envd cube-console runsc; do
	[ -x "bin/$b" ] || die "bin/$b is missing: run make build first"
done
command -v node >/dev/null || die "node is not installed (Node >= 20.18.1 is needed)"
# The web console's test drives Debian's Chromium (tests/console.test.mjs).
if [ ! -x /usr/bin/chromium ]; then
	echo "e2e: installing chromium"
	{ DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || die "could not install chromium (apt-get install chromium)"
fi

data="$(mktemp -d /tmp/cube-e2e.XXXXXX)"
log="$data.server.log"
# A random slot prefix and /22 keep two runs (or another server) apart.
tag="$(od -An -N2 -tx1 /dev/urandom | tr -d ' \n')"
prefix="e2e$tag"
cidr="10.250.$(( (0x$tag % 64) * 4 )).0/22"
key="e2b_$(od -An -N20 -tx1 /dev/urandom | tr -d ' \n')"
url=""
server_pid=""
child=""
status=1

# fg runs a command in its own process group and waits for it, so that a
# signal to this script runs the cleanup at once (instead of after the
# command) and the cleanup can stop the command with everything it started.
fg() {
	setsid "$@" &
	child=$!
	wait "$child"
	local rc=$?
	child=""
	return "$rc"
}

# api METHOD PATH: one control-plane call with this run's key.
api() { curl -sS --max-time 30 -X "$1" -H "X-API-Key: $key" "$url$2"; }

# Every sandbox the server knows about, running or paused, page by page.
sandbox_ids() {
	local token="" headers body
	headers="$(mktemp)"
	while :; do
		body="$(curl -sS --max-time 30 -D "$headers" -H "X-API-Key: $key" \
			"$url/v2/sandboxes?state=running,paused&limit=100${token:+&nextToken=$token}")" || break
		printf '%s' "$body" | grep -o '"sandboxID":"[a-z0-9]*"' | cut -d'"' -f4
		token="$(grep -i '^x-next-token:' "$headers" | cut -d' ' -f2 | tr -d '\r')"
		[ -n "$token" ] || break
	done
	rm -f "$headers"
}

cleanup() {
	local rc=$status
	trap - EXIT INT TERM
	if [ -n "$child" ]; then
		kill -TERM -- "-$child" 2>/dev/null
		wait "$child" 2>/dev/null
	fi
	if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
		if [ -n "$url" ]; then
			for id in $(sandbox_ids); do
				api DELETE "/sandboxes/$id" >/dev/null 2>&1 || echo "e2e: could not kill sandbox $id" >&2
			done
		fi
		kill -TERM "$server_pid"
		for _ in $(seq 1 300); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
		if kill -0 "$server_pid" 2>/dev/null; then
			echo "e2e: cube-server did not stop on SIGTERM; killing it" >&2
			kill -KILL "$server_pid"
		fi
		wait "$server_pid" 2>/dev/null
	fi
	if [ "$rc" != 0 ] && [ -f "$log" ]; then
		# Warnings and errors from before the tail, where a failure's
		# cause often is (request lines aside).
		echo "==== cube-server warnings and errors (last 100, requests left out) ====" >&2
		grep -E 'level=(WARN|ERROR)' "$log" | grep -v 'msg="http request"' | tail -n 100 >&2
		echo "==== cube-server log (last 300 lines) ====" >&2
		tail -n 300 "$log" >&2
		echo "==== end of cube-server log ====" >&2
	fi
	# Never follow a mount that outlived the server into another tree.
	findmnt -rn -o TARGET | grep "^$data/" | sort -r | while read -r m; do umount -l "$m" 2>/dev/null; done
	if [ "${CUBE_E2E_KEEP:-}" = 1 ]; then
		echo "e2e: kept $data and $log" >&2
	else
		rm -rf --one-file-system "$data"
		rm -f "$log" "$data.template.log"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'status=130; exit' INT TERM

echo "e2e: starting cube-server (data $data, slots $prefix in $cidr)"
domain="e2e$tag.localhost"
CUBE_API_KEY="$key" bin/cube-server --data-dir "$data" --listen 127.0.0.1:0 --tls-listen 127.0.0.1:0 \
	--domain "$domain" --slot-prefix "$prefix" --host-cidr "$cidr" --slots 64 ${CUBE_E2E_SERVER_ARGS:-} >"$log" 2>&1 &
server_pid=$!

# The server logs the address it listens on; port 0 lets it pick a free one.
for _ in $(seq 1 600); do
	addr="$(grep -o 'msg="cube-server listening" addr=[0-9.:]*' "$log" | head -1 | sed 's/.*addr=//')"
	[ -n "$addr" ] && break
	kill -0 "$server_pid" 2>/dev/null || { echo "e2e: cube-server exited at start" >&2; exit 1; }
	sleep 0.1
done
[ -n "${addr:-}" ] || { echo "e2e: cube-server did not start listening" >&2; exit 1; }
url="http://$addr"
https_port="$(grep -o 'msg="cube-server listening" .* https=[0-9.:]*' "$log" | head -1 | sed 's/.*https=.*://')"
[ -n "$https_port" ] || { echo "e2e: cube-server logged no HTTPS listener" >&2; exit 1; }
ca="$data/tls/ca.pem"
for _ in $(seq 1 300); do
	curl -fsS --max-time 2 "$url/health" >/dev/null 2>&1 && break
	sleep 0.1
done
curl -fsS --max-time 2 "$url/health" >/dev/null || { echo "e2e: $url/health does not answer" >&2; exit 1; }
echo "e2e: cube-server on $url"

echo "e2e: building the default template"
# Its progress bars only matter when it fails.
if ! CUBE_API_URL="$url" CUBE_API_KEY="$key" E2B_API_KEY="$key" \
	fg make --no-print-directory template DATA_DIR="$data" >"$data.template.log" 2>&1; then
	tail -n 50 "$data.template.log" >&2
	echo "e2e: make template failed" >&2
	exit 1
fi
tail -n 1 "$data.template.log"

cd test/e2e
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
	echo "e2e: npm ci"
	fg npm ci --no-audit --no-fund || { echo "e2e: npm ci failed" >&2; exit 1; }
fi

# Twice: as most self-hosters point the SDKs today (plain HTTP, sandbox
# traffic routed by header through E2B_SANDBOX_URL), then the way E2B's
# cloud is reached (only E2B_DOMAIN: HTTPS to api.<domain> and
# <port>-<id>.<domain>, trusting Cube's CA). CUBE_E2E_MODES picks them.
# Files that change the whole server for a moment (the console's test
# drains this node and makes it ready again) run alone, after the others,
# so no other file's create meets the drained node.
serial=(tests/console.test.mjs)
if [ $# -gt 0 ]; then
	parallel=("$@") serial=()
else
	parallel=()
	for f in tests/*.test.mjs; do
		[[ " ${serial[*]} " == *" $f "* ]] || parallel+=("$f")
	done
fi
run=(node --test --test-reporter=spec --test-timeout=300000)

for mode in ${CUBE_E2E_MODES:-header https}; do
	echo "e2e: running the tests ($mode)"
	case "$mode" in
	header) envs=(E2B_API_URL="$url" E2B_SANDBOX_URL="$url") ;;
	https) envs=(E2B_DOMAIN="$domain:$https_port") ;;
	*) echo "e2e: unknown mode $mode (header, https)" >&2; status=2; exit 2 ;;
	esac
	envs+=(E2B_API_KEY="$key" NODE_EXTRA_CA_CERTS="$ca" CUBE_E2E_MODE="$mode" CUBE_E2E_CA="$ca")
	if [ -n "${CUBE_E2E_SCRIPT:-}" ]; then
		fg env "${envs[@]}" node "$CUBE_E2E_SCRIPT" "$@"
		status=$?
		[ "$status" = 0 ] || exit "$status"
		continue
	fi
	fg env "${envs[@]}" "${run[@]}" --test-concurrency=2 "${parallel[@]}"
	status=$?
	if [ "$status" = 0 ] && [ ${#serial[@]} -gt 0 ]; then
		fg env "${envs[@]}" "${run[@]}" --test-concurrency=1 "${serial[@]}"
		status=$?
	fi
	[ "$status" = 0 ] || exit "$status"
done
# Then the SDK version matrix (test/e2e/matrix/run.mjs): the core of the
# suite through every release of the SDKs package.json pins, over HTTPS,
# which they all reach (releases before e2b 2.7 know no E2B_SANDBOX_URL).
# Only on a whole run; CUBE_E2E_MATRIX picks releases, =none skips it.
if [ $# -eq 0 ] && [ -z "${CUBE_E2E_SCRIPT:-}" ] && [ "${CUBE_E2E_MATRIX:-}" != none ]; then
	echo "e2e: running the SDK version matrix (https)"
	fg env E2B_DOMAIN="$domain:$https_port" E2B_API_KEY="$key" NODE_EXTRA_CA_CERTS="$ca" \
		CUBE_E2E_MODE=https CUBE_E2E_CA="$ca" node matrix/run.mjs
	status=$?
fi
exit "$status"
