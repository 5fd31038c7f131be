#!/usr/bin/env bash
# bench-cluster.sh — what answering from any node costs. Two cube-server
# nodes on this host share a PostgreSQL database (Debian's, started here in
# a temporary directory); node A holds the default template; `cube-bench
# via` creates and reads sandboxes through A and through B (which forwards
# to A) side by side. It then copies the template to B (A drains, a create
# through B lands on B) and records how long that first create took.
# Results go to $OUT_DIR/cluster (via.json, copy.txt, commands.txt) and
# docs/BENCHMARKS.md is written again from them and the last `make bench`.
#
# Needs root, `make build`, `make test-deps` (postgresql) and the default
# image (`make template` builds it into /var/cache/cube once).
#   ROUNDS   measured rounds of via (default 30)
#   OUT_DIR  results directory (default docs/bench)
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")/.."
OUT_DIR=${OUT_DIR:-docs/bench}
ROUNDS=${ROUNDS:-30}
die() { echo "bench-cluster: $*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || die "run as root"
[[ -x bin/cube-server && -x bin/cube-bench ]] || die "run make build first"
pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
[[ -n $pgbin ]] || die "PostgreSQL is not installed (make test-deps)"

work=$(mktemp -d /tmp/cube-bench-cluster.XXXXXX)
chmod 755 "$work"
pids=()
pg=""
cleanup() {
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	[[ -z $pg ]] || runuser -u postgres -- "$pgbin/pg_ctl" -D "$pg" -m fast -w stop >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT

echo "bench-cluster: PostgreSQL in $work" >&2
mkdir "$work/pg" && chown postgres "$work/pg"
pg=$work/pg/data
port=$(( 20000 + RANDOM % 20000 ))
runuser -u postgres -- "$pgbin/initdb" -D "$pg" -U postgres --auth=trust -E UTF8 >/dev/null
runuser -u postgres -- "$pgbin/pg_ctl" -D "$pg" -o "-c listen_addresses=127.0.0.1 -p $port -k $work/pg" \
	-l "$work/pg/log" -w start >/dev/null
runuser -u postgres -- "$pgbin/createdb" -h 127.0.0.1 -p "$port" -U postgres cube
dsn="postgres://postgres@127.0.0.1:$port/cube?sslmode=disable"
export CUBE_API_KEY="e2b_$(openssl rand -hex 20)" E2B_API_KEY=
secret=$(openssl rand -hex 32)

# node NAME PORT SLOT-PREFIX HOST-CIDR: a cube-server of the cluster. Both
# nodes are on this host, so their traffic stays on loopback: plain signed
# HTTP between them (--cluster-insecure-transport) is what is measured.
node() {
	mkdir -m 700 "$work/$1"
	CUBE_CLUSTER_SECRET="$secret" ./bin/cube-server --data-dir "$work/$1" --listen "127.0.0.1:$2" --tls-listen 127.0.0.1:0 \
		--store "$dsn" --node-id "$1" --advertise "http://127.0.0.1:$2" --cluster-insecure-transport \
		--slot-prefix "$3" --host-cidr "$4" >"$work/$1.log" 2>&1 &
	pids+=($!)
	for _ in $(seq 1 150); do
		curl -fsS -o /dev/null "http://127.0.0.1:$2/health" && return 0
		sleep 0.2
	done
	tail -n 20 "$work/$1.log" >&2
	die "node $1 did not start"
}
a=$(( 31000 + RANDOM % 1000 )) b=$(( 32000 + RANDOM % 1000 ))
node node-a "$a" cbka 10.219.0.0/22
node node-b "$b" cbkb 10.219.4.0/22
echo "bench-cluster: the default template on node-a" >&2
CUBE_API_URL="http://127.0.0.1:$a" make --no-print-directory template DATA_DIR="$work/node-a" >&2

mkdir -p "$OUT_DIR/cluster"
rm -f "$OUT_DIR"/cluster/*
cmds=$OUT_DIR/cluster/commands.txt
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown); node-a and node-b on this host, PostgreSQL $("$pgbin/postgres" --version | awk '{print $3}')" >"$cmds"
via=(./bin/cube-bench via --api-url "http://127.0.0.1:$a" --via "http://127.0.0.1:$b" -t code-interpreter-v1 -n "$ROUNDS" -w 3 -q -o "$OUT_DIR/cluster/via.json")
echo "${via[*]}" | sed "s/$a/<node-a>/; s/$b/<node-b>/" >>"$cmds"
"${via[@]}"

# The first create on a node without the template pays its copy.
api() { curl -fsS -H "X-API-Key: $CUBE_API_KEY" -H 'Content-Type: application/json' -X "$1" "http://127.0.0.1:$2$3" ${4:+-d "$4"}; }
api POST "$a" /nodes/node-a '{"status":"draining"}' >/dev/null
start=$(date +%s%N)
out=$(api POST "$b" /sandboxes '{"templateID":"code-interpreter-v1","timeout":60}')
first=$(( ($(date +%s%N) - start) / 1000000 ))
start=$(date +%s%N)
again=$(api POST "$b" /sandboxes '{"templateID":"code-interpreter-v1","timeout":60}')
second=$(( ($(date +%s%N) - start) / 1000000 ))
for sb in "$out" "$again"; do
	[[ $sb == *'"clientID":"node-b"'* ]] || die "a create while node-a drains did not land on node-b: $sb"
	api DELETE "$b" "/sandboxes/$(sed 's/.*"sandboxID":"\([^"]*\)".*/\1/' <<<"$sb")" >/dev/null
done
size=$(du -sm "$work/node-b/copies" | cut -f1)
echo "# node-a drained; two creates through node-b" >>"$cmds"
printf 'first %d\nsecond %d\ncopy_mb %d\n' "$first" "$second" "$size" >"$OUT_DIR/cluster/copy.txt"
echo "bench-cluster: first create on node-b (with the copy of $size MB) $first ms, the next $second ms" >&2

./bin/cube-bench report --dir "$OUT_DIR" --out docs/BENCHMARKS.md --runsc bin/runsc \
	--commit "$(git rev-parse --short HEAD 2>/dev/null)"
cp docs/BENCHMARKS.md internal/webui/dist/benchmarks.md # the console's Node page
echo "bench-cluster: wrote docs/BENCHMARKS.md" >&2
