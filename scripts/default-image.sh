#!/usr/bin/env bash
# default-image.sh OUT.tar — build the default sandbox image from Debian
# packages alone (no container registry) and write it as an oci-archive.
#
# The image is Debian 12 (bookworm) minbase with bash, coreutils, curl,
# ca-certificates, python3 and Debian's ipykernel, numpy, pandas and
# matplotlib, node with npm and TypeScript, R with IRkernel, a Java 17
# runtime (jlink) with JShell, and Jupyter kernels for python, bash,
# javascript, typescript, r and java (the non-Debian ones are Cube's, in
# image/rootfs), plus a user `user` (uid 1000). It has no CMD: cube-envd is
# bind-mounted at run time, runs as PID 1 and serves the code interpreter.
#
# Skips the build when OUT is newer than this script. Needs root (debootstrap
# and file ownership). Downloaded .debs are kept in $CUBE_CACHE_DIR so a
# rebuild does not fetch them again.
#
# Measured on a 2-core VM with warm caches: 99 s without Java, 171 s with
# it on a host busy with other work (unpacking the JDK, javac, jlink and the
# warm-up run); the result is a 927 MB rootfs in a 358 MB archive (824 MB
# and 318 MB without Java, 685 MB and 255 MB without the bash, JS/TS, R and
# Java kernels' runtimes).
#
# Environment:
#   DEBIAN_MIRROR       default http://deb.debian.org/debian
#   CUBE_CACHE_DIR      default /var/cache/cube
#   SANDBOX_NAMESERVER  resolver written to the image's /etc/resolv.conf
#   GZIP_LAYER=0        store the layer uncompressed (about 2.5 times bigger,
#                       no gzip on build or unpack); default 1
set -euo pipefail

# The resolver sandboxes use. It must answer or fail fast: an unreachable
# resolver makes Python's http.server take ~11 s to bind (reverse lookup).
SANDBOX_NAMESERVER=${SANDBOX_NAMESERVER:-10.88.0.1}

SUITE=bookworm
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
CACHE_DIR=${CUBE_CACHE_DIR:-/var/cache/cube}
# debootstrap always takes the first of alternative dependencies, which for
# python3-fonttools (via matplotlib) is scipy and with it gcc, g++, boost and
# python3-dev (+600 MB). So debootstrap lays down only the base system and
# apt, whose resolver honours alternatives, installs the Python stack;
# python3-munkres is the small alternative that keeps scipy out.
BASE_PACKAGES=bash,coreutils,curl,ca-certificates
PY_PACKAGES="python3 python3-munkres python3-ipykernel python3-numpy python3-pandas python3-matplotlib"
# What E2B's SDK expects of a template: its readiness helpers run ss
# (waitForPort) and pgrep (waitForProcess), and its users run git and sudo.
TOOL_PACKAGES="iproute2 procps sudo git"
# The code interpreter's other languages (image/rootfs has their kernels):
# bash and JavaScript/TypeScript through Cube's wrapper kernels
# (cube_kernels, on ipykernel), R through Debian's IRkernel, whose
# kernelspec "ir" declares language "R"; python as a name for python3.
KERNEL_PACKAGES="python-is-python3 nodejs r-base-core r-cran-irkernel"
# Java: Debian's JDK is not installed but unpacked in the tree's /tmp, only
# to compile Cube's JShell driver and to jlink a runtime of the modules below
# into $JAVA_RUNTIME. The runtime has JShell (and the compiler it runs) and
# the Java SE modules a cell may use, without java.desktop (AWT/Swing, whose
# native libraries need X11 and font packages). Debian's native libraries
# are stripped already (jlink's --strip-debug would want objcopy).
JAVA_PACKAGES="openjdk-17-jre-headless openjdk-17-jdk-headless"
JAVA_HOME_BUILD=/tmp/jdk/usr/lib/jvm/java-17-openjdk-amd64
JAVA_RUNTIME=/usr/local/lib/cube-java
JAVA_MODULES=java.base,java.compiler,java.instrument,java.logging,java.management,java.naming,java.net.http,java.prefs,java.rmi,java.scripting,java.security.jgss,java.security.sasl,java.sql,java.sql.rowset,java.xml,java.xml.crypto,jdk.charsets,jdk.crypto.ec,jdk.httpserver,jdk.jshell,jdk.unsupported,jdk.zipfs
# From the npm registry, pinned: npm itself, as in E2B's image (Debian's
# npm package brings 140 MB of node-* packages; the registry's tarball has
# its dependencies bundled), and TypeScript for the typescript kernel's
# transpileModule. Both go to /usr/local/lib/node_modules.
NPM_VERSION=10.8.2
NPM_INTEGRITY=sha512-x/AIjFIKRllrhcb48dqUNAAZl0ig9+qMuN91RpZo3Cb2+zuibfh+KISl6+kVVyktDz230JKc208UkQwwMqyB+w==
TYPESCRIPT_VERSION=5.6.3
TYPESCRIPT_INTEGRITY=sha512-hjcS1mhfuyi4WW8IWtjP7brDrG2cuDZukyrYrSauoXGNgx0S7zceP07adYkJycEr56BOUTNPzbInooiN3fn1qw==
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

# Up to date when newer than this script and every file of image/.
newest=$(find "$script" "$repo/image" -type f -printf '%T@ %p\n' | sort -n | tail -1 | cut -d' ' -f2-)
if [[ -f "$OUT" && "$OUT" -nt "$newest" ]]; then
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
	if [[ -n "${rootfs:-}" ]] && mountpoint -q "$rootfs/proc" 2>/dev/null; then umount "$rootfs/proc" || true; fi
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
step() { echo "default image: [$1/5] $2 ($((SECONDS - start)) s elapsed)"; }

step 1 "debootstrap $SUITE minbase from $MIRROR"
mkdir -p "$CACHE_DIR/debootstrap" "$CACHE_DIR/apt"
debootstrap --variant=minbase --cache-dir="$CACHE_DIR/debootstrap" --include="$BASE_PACKAGES" \
	"$SUITE" "$rootfs" "$MIRROR" 2>&1 | grep -E --line-buffered '^(W|E): |^I: (Retrieving|Extracting|Installing|Configuring|Base system)' \
	| awk '{ print "  " $0; fflush() }' || true
# The filter hides debootstrap's exit status; check the result instead.
if [[ ! -x "$rootfs/usr/bin/apt-get" || ! -f "$rootfs/var/lib/dpkg/status" || -d "$rootfs/debootstrap" ]]; then
	echo "default image: debootstrap failed" >&2
	cp "$rootfs/debootstrap/debootstrap.log" "$(dirname "$OUT")/default-image-debootstrap.log" 2>/dev/null &&
		echo "default image: its log is in $(dirname "$OUT")/default-image-debootstrap.log" >&2
	exit 1
fi

step 2 "apt-get install $PY_PACKAGES $TOOL_PACKAGES $KERNEL_PACKAGES (and download $JAVA_PACKAGES)"
# Leave out documentation and translations, as Debian's slim images do
# (copyright files stay); about 60 MB.
cat >"$rootfs/etc/dpkg/dpkg.cfg.d/cube-slim" <<'EOF'
path-exclude=/usr/share/doc/*
path-include=/usr/share/doc/*/copyright
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
path-exclude=/usr/share/locale/*
path-include=/usr/share/locale/locale.alias
path-exclude=/usr/share/lintian/*
EOF
find "$rootfs/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
find "$rootfs/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
rm -rf "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/usr/share/lintian/*
in_root() { chroot "$rootfs" /usr/bin/env -i PATH="$IMAGE_PATH" DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 "$@"; }
# The JDK's postinst links its man pages with update-alternatives, which
# fails when their directory is missing (the pages themselves are left out).
mkdir -p "$rootfs/usr/share/man/man1"
# Reuse .debs from earlier builds: copied in, new ones copied back out.
find "$CACHE_DIR/apt" -maxdepth 1 -name '*.deb' -exec cp -n -t "$rootfs/var/cache/apt/archives/" {} +
in_root apt-get update -qq
in_root apt-get install -y -qq --no-install-recommends $PY_PACKAGES $TOOL_PACKAGES $KERNEL_PACKAGES 2>&1 |
	grep -E --line-buffered '^(Unpacking|Setting up|E:|W:)' | grep -v --line-buffered 'Can not write log' | awk '{ print "  " $0; fflush() }' || true
for p in $JAVA_PACKAGES; do
	v=$(in_root apt-cache show --no-all-versions "$p" | sed -n 's/^Version: //p')
	deb=var/cache/apt/archives/${p}_${v//:/%3a}_amd64.deb
	if [[ ! -f "$rootfs/$deb" ]]; then
		in_root sh -c "cd /var/cache/apt/archives && apt-get download -qq '$p=$v'" 2>&1 | grep -v unsandboxed || true
	fi
	[[ -f "$rootfs/$deb" ]] || { echo "default image: could not download $p $v" >&2; exit 1; }
	dpkg-deb -x "$rootfs/$deb" "$rootfs/tmp/jdk"
done
find "$rootfs/var/cache/apt/archives" -maxdepth 1 -name '*.deb' -exec cp -n -t "$CACHE_DIR/apt/" {} +
for p in $PY_PACKAGES $TOOL_PACKAGES $KERNEL_PACKAGES; do
	if ! in_root dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
		echo "default image: apt-get did not install $p" >&2
		exit 1
	fi
done
# npm and TypeScript (packages whose dependencies are bundled or none) from
# the npm registry, fetched by the build host's npm, which has the host's
# network and CA settings, checked against their pinned integrity, kept in
# $CACHE_DIR/npm like the .debs, and unpacked where npm -g puts packages.
npm_package() { # NAME VERSION INTEGRITY
	local tgz="$CACHE_DIR/npm/$1-$2.tgz"
	if [[ ! -f "$tgz" ]]; then
		command -v npm >/dev/null || { echo "default image: the build host's npm is needed to fetch $1@$2" >&2; exit 1; }
		mkdir -p "$CACHE_DIR/npm"
		(cd "$CACHE_DIR/npm" && npm pack --silent "$1@$2" >/dev/null)
	fi
	if [[ "sha512-$(openssl dgst -sha512 -binary "$tgz" | base64 -w0)" != "$3" ]]; then
		echo "default image: $tgz does not match $3" >&2
		rm -f "$tgz"
		exit 1
	fi
	mkdir -p "$rootfs/usr/local/lib/node_modules/$1"
	tar -xzf "$tgz" -C "$rootfs/usr/local/lib/node_modules/$1" --strip-components=1 --no-same-owner
}
npm_package npm "$NPM_VERSION" "$NPM_INTEGRITY"
npm_package typescript "$TYPESCRIPT_VERSION" "$TYPESCRIPT_INTEGRITY"
mkdir -p "$rootfs/usr/local/bin"
ln -sf ../lib/node_modules/npm/bin/npm-cli.js "$rootfs/usr/local/bin/npm"
ln -sf ../lib/node_modules/npm/bin/npx-cli.js "$rootfs/usr/local/bin/npx"
ln -sf ../lib/node_modules/typescript/bin/tsc "$rootfs/usr/local/bin/tsc"
ln -sf ../lib/node_modules/typescript/bin/tsserver "$rootfs/usr/local/bin/tsserver"

step 3 "configuring the tree"
# Cube's own files (image/rootfs): kernels, display formatters, settings.
if [[ -d "$repo/image/rootfs" ]]; then cp -a --no-preserve=ownership "$repo/image/rootfs/." "$rootfs/"; fi
in_root /usr/sbin/useradd --uid "$SANDBOX_UID" --user-group --create-home \
	--home-dir /home/user --shell /bin/bash user
# As in E2B's templates, the sandbox user may become root without a password.
printf 'user ALL=(ALL:ALL) NOPASSWD: ALL\n' >"$rootfs/etc/sudoers.d/user"
chmod 0440 "$rootfs/etc/sudoers.d/user"
printf 'nameserver %s\noptions timeout:1 attempts:1\n' "$SANDBOX_NAMESERVER" >"$rootfs/etc/resolv.conf"
printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$rootfs/etc/hosts"
echo sandbox >"$rootfs/etc/hostname"
: >"$rootfs/etc/machine-id"
# Check the stack imports and build matplotlib's font cache now, as the
# sandbox user, instead of in every sandbox's first plot. The backend is
# left alone: ipykernel selects its inline backend itself.
in_root /usr/sbin/runuser -u user -- env HOME=/home/user \
	/usr/bin/python3 -c 'import ipykernel, numpy, pandas, matplotlib.pyplot; print("  python", __import__("sys").version.split()[0], "numpy", numpy.__version__, "pandas", pandas.__version__, "matplotlib", matplotlib.__version__)'
# The other kernels' runtimes: node with TypeScript, and R with IRkernel.
in_root /usr/sbin/runuser -u user -- env HOME=/home/user /usr/bin/node -e \
	'console.log("  node", process.versions.node, "typescript", require("/usr/local/lib/node_modules/typescript").version)'
in_root /usr/sbin/runuser -u user -- env HOME=/home/user /usr/local/bin/npm --version | awk '{ print "  npm " $0 }'
in_root /usr/sbin/runuser -u user -- env HOME=/home/user /usr/bin/Rscript -e \
	'suppressMessages(library(IRkernel)); cat("  R", format(getRversion()), "IRkernel", format(packageVersion("IRkernel")), "\n")'
in_root /usr/bin/python3 -m compileall -q /usr/local/lib/python3.11/dist-packages/cube_kernels
# The Java kernel: its driver compiled into a jar, a jlinked runtime with a
# class data archive of the base modules, and one of the classes a first
# cell loads (JShell's compiler), recorded by running two cells; the JDK
# goes with /tmp. Java wants /proc, mounted for these steps alone.
kernels=/usr/local/lib/python3.11/dist-packages/cube_kernels
du_jdk=$(du -sm "$rootfs$JAVA_HOME_BUILD" | cut -f1)
mount -t proc proc "$rootfs/proc"
# The JDK's configuration files are links into /etc/java-17-openjdk, which
# its package would have put there; the runtime jlink makes has its own.
ln -sfn /tmp/jdk/etc/java-17-openjdk "$rootfs/etc/java-17-openjdk"
mkdir -p "$rootfs/tmp/jshell-classes"
# (javac warns that sun.misc.Signal, for SIGINT, is internal API: shown only on failure.)
in_root "$JAVA_HOME_BUILD/bin/javac" -nowarn -d /tmp/jshell-classes "$kernels/CubeJShell.java" >"$work/javac.log" 2>&1 ||
	{ cat "$work/javac.log" >&2; echo "default image: javac failed" >&2; exit 1; }
in_root "$JAVA_HOME_BUILD/bin/jar" --create --file "$kernels/cube-jshell.jar" -C /tmp/jshell-classes .
rm -rf "$rootfs$JAVA_RUNTIME"
in_root "$JAVA_HOME_BUILD/bin/jlink" --add-modules "$JAVA_MODULES" --strip-java-debug-attributes --no-man-pages --no-header-files \
	--generate-cds-archive --output "$JAVA_RUNTIME"
# The archive for heaps over 32 GB (no compressed pointers) is never used here.
rm -f "$rootfs$JAVA_RUNTIME/lib/server/classes_nocoops.jsa"
cell() { printf '0 %d\n%s' "${#1}" "$1"; } # a request: not silent, the code's length, the code
{ cell 'int cubeWarm = 40 + 2;'; cell 'String.join(" ", List.of("warm", "up"))'; } >"$rootfs/tmp/warm.req"
in_root "$JAVA_RUNTIME/bin/java" -XX:+UseSerialGC -XX:-UsePerfData -Xlog:disable -Xlog:all=warning:stderr -XX:ArchiveClassesAtExit="$JAVA_RUNTIME/lib/cube-jshell.jsa" \
	-cp "$kernels/cube-jshell.jar" CubeJShell /tmp/warm.req /tmp/warm.out
java_version=$(in_root "$JAVA_RUNTIME/bin/java" -version 2>&1 | head -1 | cut -d'"' -f2)
umount "$rootfs/proc"
rm "$rootfs/etc/java-17-openjdk"
if ! grep -q '"text":"warm up"' "$rootfs/tmp/warm.out"; then
	echo "default image: the Java driver's warm-up run did not answer:" >&2
	cat "$rootfs/tmp/warm.out" >&2
	exit 1
fi
# Every library the runtime's native code links is in the image (libjvm.so
# is the JVM's own, which the launcher loads by path).
missing=$(cd "$rootfs" && find ".$JAVA_RUNTIME" -name '*.so' | while read -r so; do in_root /usr/bin/ldd "${so#.}"; done | grep 'not found' | grep -v 'libjvm.so' | sort -u || true)
if [[ -n "$missing" ]]; then
	echo "default image: the Java runtime lacks libraries:" >&2
	echo "$missing" >&2
	exit 1
fi
echo "  java $java_version: runtime $(du -sm "$rootfs$JAVA_RUNTIME" | cut -f1) MB (the JDK was $du_jdk MB)"
in_root apt-get clean
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb \
	"$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/var/log/apt/* "$rootfs"/var/log/dpkg.log \
	"$rootfs"/var/log/bootstrap.log "$rootfs"/root/.cache "$rootfs"/tmp/* "$rootfs"/dev/*

step 4 "packing the image (go run ./tools/mkimage)"
mk_args=(-rootfs "$rootfs" -out "$work/image.tar" -tag latest -workdir /home/user
	-env "PATH=$IMAGE_PATH" -env LANG=C.UTF-8 -expose 49983 -expose 49999)
if [[ "${GZIP_LAYER:-1}" == 1 ]]; then mk_args+=(-gzip); fi
(cd "$repo" && GOFLAGS=-mod=mod ${GO:-go} run ./tools/mkimage "${mk_args[@]}")

step 5 "installing $OUT"
mv -f "$work/image.tar" "$OUT"
echo "default image: done in $((SECONDS - start)) s, rootfs $(du -sh --apparent-size "$rootfs" | cut -f1), archive $(du -h --apparent-size "$OUT" | cut -f1)"
