#!/usr/bin/env bash
# default-image.sh OUT.tar — build the default sandbox image from Debian
# packages alone (no container registry) and write it as an oci-archive.
#
# The image is Debian 12 (bookworm) minbase with bash, coreutils, curl,
# ca-certificates, python3 and Debian's ipykernel, numpy, pandas and
# matplotlib, plus a user `user` (uid 1000). It has no CMD: cube-envd is
# bind-mounted at run time, runs as PID 1 and serves the code interpreter.
#
# Skips the build when OUT is newer than this script. Needs root (debootstrap
# and file ownership). Downloaded .debs are kept in $CUBE_CACHE_DIR so a
# rebuild does not fetch them again.
#
# Environment:
#   DEBIAN_MIRROR       default http://deb.debian.org/debian
#   CUBE_CACHE_DIR      default /var/cache/cube
#   SANDBOX_NAMESERVER  resolver written to the image's /etc/resolv.conf
#   GZIP_LAYER=1        gzip the layer (smaller file, slower build and unpack)
set -euo pipefail

# The resolver sandboxes use. It must answer or fail fast: an unreachable
# resolver makes Python's http.server take ~11 s to bind (reverse lookup).
SANDBOX_NAMESERVER=${SANDBOX_NAMESERVER:-10.88.0.1}

SUITE=bookworm
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
CACHE_DIR=${CUBE_CACHE_DIR:-/var/cache/cube}/debootstrap
PACKAGES=bash,coreutils,curl,ca-certificates,python3,python3-ipykernel,python3-numpy,python3-pandas,python3-matplotlib
SANDBOX_UID=1000
IMAGE_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

OUT=${1:-}
if [[ -z "$OUT" || $# -ne 1 ]]; then
	echo "usage: $0 OUT.tar" >&2
	exit 2
fi
script=$(readlink -f "$0")
repo=$(dirname "$(dirname "$script")")
OUT=$(readlink -m "$OUT")

if [[ -f "$OUT" && "$OUT" -nt "$script" ]]; then
	echo "default image: $OUT is up to date"
	exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
	echo "default image: must run as root (debootstrap, file ownership)" >&2
	exit 1
fi
command -v debootstrap >/dev/null || { echo "default image: debootstrap is not installed (make deps)" >&2; exit 1; }

mkdir -p "$(dirname "$OUT")" "$CACHE_DIR"
work=$(mktemp -d "$(dirname "$OUT")/.default-image.XXXXXX")
cleanup() {
	local rc=$?
	# Nothing is mounted inside the tree, but be sure before deleting it.
	if findmnt -rn -o TARGET | grep -qF "$work/"; then
		echo "default image: mounts left under $work; not deleting it" >&2
	else
		rm -rf "$work"
	fi
	if [[ $rc -ne 0 ]]; then echo "default image: FAILED (exit $rc)" >&2; fi
}
trap cleanup EXIT
rootfs=$work/rootfs
start=$SECONDS
step() { echo "default image: [$1/4] $2 ($((SECONDS - start)) s elapsed)"; }

step 1 "debootstrap $SUITE minbase from $MIRROR"
debootstrap --variant=minbase --cache-dir="$CACHE_DIR" --include="$PACKAGES" \
	"$SUITE" "$rootfs" "$MIRROR" 2>&1 | grep -E --line-buffered '^(I|W|E): (Retriev|Validat|Extract|Install|Configur|Base system|Check|Resolv|Found)' \
	| awk '{ print "  " $0; fflush() }' || true
# The filter hides debootstrap's exit status; check the result instead.
if [[ ! -x "$rootfs/usr/bin/python3" || ! -f "$rootfs/var/lib/dpkg/status" ]]; then
	echo "default image: debootstrap failed; see $rootfs/debootstrap/debootstrap.log" >&2
	cp "$rootfs/debootstrap/debootstrap.log" "$(dirname "$OUT")/default-image-debootstrap.log" 2>/dev/null || true
	exit 1
fi

step 2 "configuring the tree"
chroot "$rootfs" /usr/sbin/useradd --uid "$SANDBOX_UID" --user-group --create-home \
	--home-dir /home/user --shell /bin/bash user
printf 'nameserver %s\noptions timeout:1 attempts:1\n' "$SANDBOX_NAMESERVER" >"$rootfs/etc/resolv.conf"
printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$rootfs/etc/hosts"
echo sandbox >"$rootfs/etc/hostname"
: >"$rootfs/etc/machine-id"
# Check the stack imports and build matplotlib's font cache now, as the
# sandbox user, instead of in every sandbox's first plot. The backend is
# left alone: ipykernel selects its inline backend itself.
chroot "$rootfs" /usr/sbin/runuser -u user -- env HOME=/home/user PATH="$IMAGE_PATH" \
	/usr/bin/python3 -c 'import ipykernel, numpy, pandas, matplotlib.pyplot; print("  python", __import__("sys").version.split()[0], "numpy", numpy.__version__, "pandas", pandas.__version__, "matplotlib", matplotlib.__version__)'
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb \
	"$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/debootstrap \
	"$rootfs"/var/log/bootstrap.log "$rootfs"/root/.cache "$rootfs"/tmp/* "$rootfs"/dev/*

step 3 "packing the image (go run ./tools/mkimage)"
mk_args=(-rootfs "$rootfs" -out "$work/image.tar" -tag latest -workdir /home/user
	-env "PATH=$IMAGE_PATH" -env LANG=C.UTF-8 -expose 49983 -expose 49999)
if [[ "${GZIP_LAYER:-0}" == 1 ]]; then mk_args+=(-gzip); fi
(cd "$repo" && GOFLAGS=-mod=mod ${GO:-go} run ./tools/mkimage "${mk_args[@]}")

step 4 "installing $OUT"
mv -f "$work/image.tar" "$OUT"
echo "default image: done in $((SECONDS - start)) s, rootfs $(du -sh --apparent-size "$rootfs" | cut -f1), archive $(du -h --apparent-size "$OUT" | cut -f1)"
