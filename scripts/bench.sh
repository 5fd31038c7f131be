#!/usr/bin/env bash
# bench.sh — run every table of the CubeSandbox performance report against a
# running Cube server on this host, with the raw gVisor (runsc) baseline
# beside each, then regenerate docs/BENCHMARKS.md and its charts.
#
# Environment:
#   E2B_API_URL       server (default http://127.0.0.1:3000)
#   E2B_API_KEY       API key (default: read from $DATA_DIR/api-key)
#   CUBE_TEMPLATE_ID  template to benchmark (default code-interpreter-v1)
#   DATA_DIR          the server's data directory (default /var/lib/cube);
#                     the baseline finds the template's rootfs there, and
#                     pause-resume --from-disk the sandboxes' pause images
#   RUNSC             runsc binary for the baseline (default bin/runsc)
#   BENCH             cube-bench binary (default bin/cube-bench)
#   OUT_DIR           results directory (default docs/bench)
#   QUICK=1           much smaller counts, for trying the script out
#   SETTLE            seconds to let the server settle between tables (default 3)
#
# Counts follow the report except where a 2-core machine needs less; every
# command run is recorded in $OUT_DIR/commands.txt and printed in the page.
# A table whose command fails (say, a route the server does not implement
# yet) gets its error recorded in $OUT_DIR/<name>.err and shown in the page;
# the run carries on. Needs root (the baseline runs runsc).
# Each server table also records the host CPU per operation (all of this
# host's processes, so keep the machine otherwise idle) and, from the
# server's GET /metrics, the phases its operations spent their time in.
set -uo pipefail

cd "$(dirname "$(readlink -f "$0")")/.."
export E2B_API_URL=${E2B_API_URL:-http://127.0.0.1:3000}
DATA_DIR=${DATA_DIR:-/var/lib/cube}
if [[ -z "${E2B_API_KEY:-}" && -r "$DATA_DIR/api-key" ]]; then
	E2B_API_KEY=$(<"$DATA_DIR/api-key")
fi
export E2B_API_KEY=${E2B_API_KEY:-}
export CUBE_TEMPLATE_ID=${CUBE_TEMPLATE_ID:-code-interpreter-v1}
RUNSC=${RUNSC:-bin/runsc}
OUT_DIR=${OUT_DIR:-docs/bench}
SETTLE=${SETTLE:-3}
BENCH=${BENCH:-bin/cube-bench}
QUICK=${QUICK:-0}

die() { echo "bench: $*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || die "run as root (the runsc baseline needs it)"
[[ -x $BENCH ]] || die "$BENCH is missing; run make build"
[[ -x $RUNSC ]] || die "$RUNSC is missing; run make build"
[[ -n $E2B_API_KEY ]] || die "no API key: set E2B_API_KEY or DATA_DIR"
curl -fsS -o /dev/null "$E2B_API_URL/health" || die "no Cube server answers at $E2B_API_URL (make run)"
curl -fsS -o /dev/null -H "X-API-Key: $E2B_API_KEY" "$E2B_API_URL/templates/$CUBE_TEMPLATE_ID" ||
	die "template $CUBE_TEMPLATE_ID is not known to the server (make template)"
curl -fsS -o /dev/null "$E2B_API_URL/metrics" ||
	echo "bench: warning: $E2B_API_URL/metrics does not answer; the page's 'Where the time goes' will be empty" >&2

mkdir -p "$OUT_DIR"
rm -f "$OUT_DIR"/*.json "$OUT_DIR"/*.err "$OUT_DIR"/*.txt "$OUT_DIR"/*.png
CMDS=$OUT_DIR/commands.txt
{
	echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
	echo "export E2B_API_URL=$E2B_API_URL E2B_API_KEY=<key> CUBE_TEMPLATE_ID=$CUBE_TEMPLATE_ID"
} >"$CMDS"

# q FULL SMALL: the count to use.
q() { if [[ $QUICK == 1 ]]; then echo "$2"; else echo "$1"; fi; }

# step NAME ARGS...: run cube-bench ARGS with -o $OUT_DIR/NAME.json, record
# the command, keep its output in NAME.txt and its failure in NAME.err.
step() {
	local name=$1
	shift
	local out=$OUT_DIR/$name.json
	echo "./bin/cube-bench $* -o $out" >>"$CMDS"
	echo "== $name: cube-bench $*" >&2
	if ! "$BENCH" "$@" -o "$out" >"$OUT_DIR/$name.txt" 2>"$OUT_DIR/$name.log"; then
		cat "$OUT_DIR/$name.txt" "$OUT_DIR/$name.log" >"$OUT_DIR/$name.err"
		rm -f "$out"
		echo "   failed: $(tail -n 1 "$OUT_DIR/$name.log")" >&2
	else
		cat "$OUT_DIR/$name.txt" >&2
	fi
	rm -f "$OUT_DIR/$name.log"
	sleep "$SETTLE"
}
note() { echo "# $*" >>"$CMDS"; }

start=$(date +%s)

note "3.2 create at c=1/10/20 (report: n=20/200/300)"
step create-c1 -c 1 -n 20 -w 3 -q
step create-c10 -c 10 -n "$(q 200 30)" -w 3 -q
step create-c20 -c 20 -n "$(q 300 40)" -w 3 -q

note "teams: what a team's key and quota checks add to a create and a read (admin key vs a throwaway team with quotas, 20 idle sandboxes beside), and creates of two teams at once"
step teams teams -r "$(q 30 5)" -n "$(q 20 5)" -q
# The same checks alone as Go benchmarks (no server); the page's table reads
# teams-go.txt.
GO=${GO:-go}
command -v "$GO" >/dev/null || GO=/usr/local/go/bin/go
# gobench PACKAGE BENCH BENCHTIME: one go test -bench, its command first.
gobench() {
	echo "# go test -run x -bench '$2' -benchtime $3 $1"
	GOFLAGS=${GOFLAGS:--mod=mod} "$GO" test -run x -bench "$2" -benchtime "$3" "$1" 2>&1 |
		grep -E '^(goos|goarch|pkg|cpu|Benchmark|ok|FAIL|---)'
}
if command -v "$GO" >/dev/null; then
	{
		gobench ./internal/teams . "$(q 2000x 200x)"
		gobench ./internal/quota 'Start(NoQuotas|Parallel)' "$(q 2000x 200x)"
		gobench ./internal/quota 'Start$' "$(q 2000x 200x)"
	} >"$OUT_DIR/teams-go.txt"
	note "teams: the Go benchmarks' commands are the '# ' lines of $OUT_DIR/teams-go.txt"
fi

note "3.3 density: batches 1+4+5+10 = 20 idle sandboxes, as the report"
step density density --data-dir "$DATA_DIR" -b "$(q 1,4,5,10 1,4)" -q
note "3.3 density at 50 idle sandboxes (sandboxes share their template's memory)"
step density-n50 density --data-dir "$DATA_DIR" -b "$(q 10,10,10,10,10 5,5)" -q

note "4.1 snapshot at c=1/5/10"
for c in 1 5 10; do step "snapshot-c$c" snapshot -c "$c" -n "$(q 5 2)" -q; done

note "4.2 dirty memory 0…1024 MB (report: -n 3)"
for d in 0 10 50 100 200 500 800 1024; do
	[[ $QUICK == 1 && $d -gt 100 ]] && continue
	step "dirty-d$d" dirty -d "$d" -n "$(q 3 1)" -q
done

note "4.3 create from a snapshot at c=1/10/20"
for c in 1 10 20; do step "cfs-c$c" create-from-snapshot -c "$c" -n "$(q 3 1)" -q; done

note "4.4 rollback at c=1/5/10"
for c in 1 5 10; do step "rollback-c$c" rollback -c "$c" -n "$(q 5 2)" -q; done
note "rollback to the same snapshot every round (an RL environment's reset), c=1"
step "rollback-reset-c1" rollback --reset -c 1 -n "$(q 10 3)" -q

note "4.5 clone n=1 c=1 (5 rounds), n=10 c=5, n=20 c=10 (3 rounds)"
step clone-n1 clone -n 1 -c 1 --rounds "$(q 5 2)" -q
step clone-n10 clone -n 10 -c 5 --rounds "$(q 3 1)" -q
step clone-n20 clone -n 20 -c 10 --rounds "$(q 3 1)" -q

note "4.6 pause/resume at c=1/10"
for c in 1 10; do step "pause-resume-c$c" pause-resume -c "$c" -n "$(q 5 2)" -q; done
note "4.6 resume from disk at c=1: each round waits for the pause image (the server's --pause-write-delay, ~12 s a round)"
step pause-resume-disk-c1 pause-resume --from-disk --data-dir "$DATA_DIR" -c 1 -n "$(q 3 1)" -q
note "pause without memory and its fresh-boot resume at c=1"
step pause-resume-files-c1 pause-resume --files-only -c 1 -n "$(q 5 2)" -q

note "raw runsc baseline on the template's rootfs, same host, same run (scaled down: runsc is slow)"
step baseline-c1 baseline --runsc "$RUNSC" --data-dir "$DATA_DIR" -c 1 -n "$(q 10 3)" --idle "$(q 10 3)" -q
for c in 5 10 20; do
	[[ $QUICK == 1 && $c -gt 5 ]] && continue
	step "baseline-c$c" baseline --runsc "$RUNSC" --data-dir "$DATA_DIR" -c "$c" -n "$(q "$c" 5)" -w 0 -q
done
for d in 10 50 100 200 500 800 1024; do
	[[ $QUICK == 1 && $d -gt 100 ]] && continue
	step "baseline-d$d" baseline --runsc "$RUNSC" --data-dir "$DATA_DIR" -d "$d" -n "$(q 3 1)" -w 0 -q
done
# The idle (0 MB) dirty point of the baseline is the c=1 run.
[[ -f $OUT_DIR/baseline-c1.json ]] && cp "$OUT_DIR/baseline-c1.json" "$OUT_DIR/baseline-d0.json"

echo "# total $(( $(date +%s) - start )) s" >>"$CMDS"
"$BENCH" report --dir "$OUT_DIR" --out docs/BENCHMARKS.md --runsc "$RUNSC" \
	--commit "$(git rev-parse --short HEAD 2>/dev/null)" || die "writing docs/BENCHMARKS.md failed"
# The console's Node page shows the same tables.
cp docs/BENCHMARKS.md internal/webui/dist/benchmarks.md
echo "bench: wrote docs/BENCHMARKS.md ($(( $(date +%s) - start )) s)" >&2
