#!/usr/bin/env bash
# Runs cube-server on its embedded defaults in the foreground and, once it
# answers, makes sure the default template (aliases base and
# code-interpreter-v1) is ready. Ctrl-C stops the server cleanly.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA_DIR=${DATA_DIR:-/var/lib/cube}
LISTEN=${CUBE_LISTEN:-127.0.0.1:3000}
export CUBE_API_URL=${CUBE_API_URL:-http://$LISTEN}

./bin/cube-server --data-dir "$DATA_DIR" --listen "$LISTEN" "$@" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null || true; wait $pid' INT TERM

for _ in $(seq 1 300); do
	if curl -fsS "$CUBE_API_URL/health" >/dev/null 2>&1; then break; fi
	if ! kill -0 $pid 2>/dev/null; then wait $pid; exit $?; fi
	sleep 0.2
done

if ! make --no-print-directory template DATA_DIR="$DATA_DIR"; then
	echo "run: the default template is not ready; the server keeps running (retry with: make template)" >&2
fi
echo "run: cube-server is serving at $CUBE_API_URL (API key in $DATA_DIR/api-key); Ctrl-C stops it"
echo "run: web console at $CUBE_API_URL/console (sign in with the API key)"
# The HTTPS port, and the domain, as this run's flags set them.
https_port=3443 domain=cube.localhost
args=("$@")
for i in "${!args[@]}"; do
	case "${args[$i]}" in
	--tls-listen) next=${args[$((i + 1))]:-}; https_port=${next##*:} ;;
	--tls-listen=*) https_port=${args[$i]##*:} ;;
	--domain) domain=${args[$((i + 1))]:-$domain} ;;
	--domain=*) domain=${args[$i]#--domain=} ;;
	esac
done
if [ -n "$https_port" ]; then
	suffix=":$https_port"
	[ "$https_port" = 443 ] && suffix=""
	echo "run: over HTTPS as E2B_DOMAIN=$domain$suffix, trusting $DATA_DIR/tls/ca.pem (cubemastercli ca)"
fi
wait $pid
