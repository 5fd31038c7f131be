#!/usr/bin/env bash
# Builds bin/runsc from the gVisor version go.mod pins, with the sentry's and
# gofer's seccomp programs precompiled (tools/seccompgen) instead of compiled
# at every sandbox start. The Go toolchain refuses to patch files inside the
# module cache, so the module is copied to .cache/runsc/gvisor, patched there,
# and built through a workspace that replaces gvisor.dev/gvisor with the copy;
# every other module resolves exactly as go.mod and go.sum say.
#
# The copy is patched with scripts/runsc-patches/*.patch, in name order,
# before anything else reads it. Each patch is described in
# docs/RUNSC-PATCHES.md; a patch that no longer applies (a new gVisor
# pin) stops the build here rather than building a runsc without it.
#
#	scripts/build-runsc.sh [OUT]     (default bin/runsc)
#	scripts/build-runsc.sh --source  (the patched copy and workspace only)
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
OUT=${1:-bin/runsc}
WORK=.cache/runsc

mod=$($GO list -m -f '{{.Dir}}' gvisor.dev/gvisor)
[[ -d $mod ]] || $GO mod download gvisor.dev/gvisor
mod=$($GO list -m -f '{{.Dir}}' gvisor.dev/gvisor)
rm -rf "$WORK"
mkdir -p "$WORK"
cp -r "$mod" "$WORK/gvisor"
chmod -R u+w "$WORK/gvisor"
for p in scripts/runsc-patches/*.patch; do
	[[ -e $p ]] || continue
	echo "runsc: applying $p"
	patch --quiet --forward --batch -d "$WORK/gvisor" -p1 <"$p"
done
$GO run ./tools/seccompgen -gvisor "$WORK/gvisor"
cat >"$WORK/go.work" <<WORK
go $($GO mod edit -json | sed -n 's/^\t"Go": "\(.*\)",$/\1/p')

use ../..

replace gvisor.dev/gvisor => ./gvisor
WORK
[[ $OUT == --source ]] && exit 0
# Workspace mode refuses -mod=mod, which some environments put in GOFLAGS.
GOFLAGS=$(sed 's/-mod=[a-z]*//g' <<<"${GOFLAGS:-}") GOWORK=$PWD/$WORK/go.work CGO_ENABLED=0 \
	$GO build -o "$OUT" gvisor.dev/gvisor/runsc
