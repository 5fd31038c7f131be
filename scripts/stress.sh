#!/usr/bin/env bash
# Cube under CPU starvation: while one busy loop per core keeps every CPU
# busy, the end-to-end suite (scripts/e2e.sh, as make test runs it), then a
# burst of 200 mixed sandbox operations (test/e2e/stress.mjs: create, create
# from a snapshot, pause, resume, fork, kill, 4 at a time) against a private
# server of its own that scripts/e2e.sh starts the same way.
#
# It builds nothing (make stress builds first) and needs root. It ends with
# the suite's result and the burst's `N passed, M failed`, and fails when
# either failed. The busy loops are stopped on any exit. CUBE_E2E_KEEP=1
# keeps each server's data dir and log (the path is printed) for a
# post-mortem; the other CUBE_E2E_* knobs of scripts/e2e.sh apply too.
set -uo pipefail
cd "$(dirname "$0")/.."
# Hermetic, as scripts/test.sh: only scripts/e2e.sh's own knobs pass.
for v in $(compgen -e); do
	case "$v" in CUBE_E2E_*) ;; E2B_* | CUBE_*) unset "$v" ;; esac
done

hogs=()
child=""
out="$(mktemp /tmp/cube-stress.XXXXXX)"
cleanup() {
	# scripts/e2e.sh stops its server and sandboxes on TERM.
	if [ -n "$child" ]; then kill -TERM "$child" 2>/dev/null; wait "$child" 2>/dev/null; fi
	if [ ${#hogs[@]} -gt 0 ]; then kill "${hogs[@]}" 2>/dev/null; wait "${hogs[@]}" 2>/dev/null; fi
	rm -f "$out"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# step NAME CMD...: runs CMD in the background (so that a signal here stops
# it at once, through the trap), its output also kept in $out; returns its
# exit code.
step() {
	printf '\n== stress: %s (%s)\n' "$1" "$(date +%T)"
	shift
	local t0=$SECONDS rc tee_pid
	exec 3> >(tee -a "$out")
	tee_pid=$!
	"$@" >&3 2>&1 3>&- &
	child=$!
	wait "$child"
	rc=$?
	child=""
	exec 3>&-
	wait "$tee_pid"
	echo "== stress: exit $rc after $((SECONDS - t0))s"
	return "$rc"
}

for _ in $(seq "$(nproc)"); do
	sh -c 'while :; do :; done' &
	hogs+=($!)
done
echo "stress: ${#hogs[@]} busy loops, pids ${hogs[*]}"

step "end-to-end suite" env CUBE_E2E_SCRIPT= scripts/e2e.sh
suite=$?
step "burst of 200 operations" env CUBE_E2E_SCRIPT=stress.mjs CUBE_E2E_MODES=header scripts/e2e.sh 200 4
burst=$?

echo
echo "== stress: results"
echo "suite: $([ "$suite" = 0 ] && echo passed || echo "failed (exit $suite)")"
# node --test's own counts, one line per run.
awk '/^e2e: running the tests/ { mode = $NF }
	/^ℹ (tests|pass|fail|cancelled) / { counts = counts " " $2 " " $3 }
	/^ℹ duration_ms / { print "suite " mode ":" counts; counts = "" }' "$out"
burst_line="$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$out" | tail -1)"
echo "burst: ${burst_line:-no summary (exit $burst)}"
[ "$suite" = 0 ] && [ "$burst" = 0 ]
