#!/usr/bin/env bash
# Installs a Cube node from bin/ (make build): the six binaries together in
# $PREFIX/lib/cube (cube-server finds runsc, cube-envd and cube-console
# beside itself), cube-server, cubemastercli and cube-bench on the PATH in
# $PREFIX/bin, the systemd unit cube-server.service, the settings file
# /etc/cube/cube-server.env (kept when present) and the data directory
# /var/lib/cube (0700). With systemd running and no DESTDIR it enables and
# starts the unit, so the node comes back after a reboot.
#
# DESTDIR stages everything under a directory instead (for packaging and
# tests); nothing is started then.
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX=${PREFIX:-/usr/local}
DESTDIR=${DESTDIR:-}
lib="$PREFIX/lib/cube"
bins=(cube-server cubemastercli cube-bench cube-envd cube-console runsc)

for b in "${bins[@]}"; do
	[ -x "bin/$b" ] || { echo "install: bin/$b is missing: run make build first" >&2; exit 1; }
done
install -d -m 0755 "$DESTDIR$lib" "$DESTDIR$PREFIX/bin" "$DESTDIR/etc/systemd/system" "$DESTDIR/etc/cube"
install -d -m 0700 "$DESTDIR/var/lib/cube"
for b in "${bins[@]}"; do
	install -m 0755 "bin/$b" "$DESTDIR$lib/$b"
done
install -m 0644 README.md "$DESTDIR$lib/README.md"
for b in cube-server cubemastercli cube-bench; do
	ln -sfn "$lib/$b" "$DESTDIR$PREFIX/bin/$b"
done
sed "s|@LIBDIR@|$lib|g" deploy/cube-server.service >"$DESTDIR/etc/systemd/system/cube-server.service"
chmod 0644 "$DESTDIR/etc/systemd/system/cube-server.service"
env="$DESTDIR/etc/cube/cube-server.env"
if [ ! -e "$env" ]; then
	cat >"$env" <<'SETTINGS'
# Settings of cube-server.service (see cube-server --help).
# CUBE_FLAGS="--listen 127.0.0.1:3000"
# CUBE_API_KEY=
# CUBE_STORE=
# A node of a cluster (the same CUBE_STORE, CUBE_API_KEY and secret on
# every node; peers reach it over mutual TLS at --peer-listen):
# CUBE_FLAGS="--listen 0.0.0.0:3000 --node-id node-a --peer-listen 10.0.0.11:3100"
# CUBE_CLUSTER_SECRET=
SETTINGS
	chmod 0600 "$env"
fi
echo "install: Cube in $DESTDIR$lib, the unit in $DESTDIR/etc/systemd/system/cube-server.service, settings in $env"

if [ -n "$DESTDIR" ]; then
	exit 0
fi
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload
	systemctl enable --now cube-server.service
	echo "install: cube-server.service enabled and started (journalctl -u cube-server)"
else
	echo "install: systemd is not running here; start the server with: $lib/cube-server --data-dir /var/lib/cube"
fi
