#!/usr/bin/env bash
# Runs gVisor's own tests of the packages scripts/runsc-patches change,
# on the patched copy that bin/runsc is built from, with the patches' own
# tests (scripts/runsc-patches/tests) added. gVisor's Go module ships no
# test files, so they come from a gVisor git repository (GVISOR_GIT, at
# GVISOR_REV): its master branch is what the module's "go" branch is
# generated from, and the files of a commit near the pinned module
# version compile against it.
#
#	GVISOR_GIT=/path/to/gvisor[.git] [GVISOR_REV=master] scripts/runsc-test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
: "${GVISOR_GIT:?set GVISOR_GIT to a clone of https://github.com/google/gvisor (a bare one will do)}"
REV=${GVISOR_REV:-HEAD}
WORK=.cache/runsc
PKGS=(pkg/sentry/mm pkg/sentry/pgalloc pkg/sentry/state/stateio pkg/state/wire pkg/compressio runsc/specutils runsc/cmd/sandboxsetup runsc/sandbox)
# Packages whose gVisor tests import test-only packages the module does not
# ship (pkg/test/testutil, pkg/test/sandboxposture, sandboxexec's protos):
# only the patches' own tests run there.
OWN_PKGS=(runsc/cmd)
# gVisor's tests that fail on the unpatched module too, with the test files
# of master 2026-08-21: the module (2026-09-05) keeps a link's default route
# among its routes, where those tests expect it apart.
SKIP='^TestCollectLinksAndRoutes_(SingleInterface|MultipleInterfaces|IPv6Disabled)$'

GO=$GO ./scripts/build-runsc.sh --source
# What the tests need beside them: the packages' test files and the
# test-only context package they import.
git_dir=$(git -C "$GVISOR_GIT" rev-parse --absolute-git-dir 2>/dev/null || echo "$GVISOR_GIT")
git --git-dir="$git_dir" archive "$REV" "${PKGS[@]}" |
	tar -x -C "$WORK/gvisor" --wildcards --wildcards-match-slash '*_test.go'
git --git-dir="$git_dir" archive "$REV" pkg/sentry/contexttest | tar -x -C "$WORK/gvisor"
for p in scripts/runsc-patches/tests/*.patch; do
	[[ -e $p ]] || continue
	echo "runsc-test: applying $p"
	patch --quiet --forward --batch -d "$WORK/gvisor" -p1 <"$p"
done
GOFLAGS=$(sed 's/-mod=[a-z]*//g' <<<"${GOFLAGS:-}") GOWORK=$PWD/$WORK/go.work CGO_ENABLED=0 \
	$GO test -count=1 -skip "$SKIP" "${PKGS[@]/#/gvisor.dev/gvisor/}" "${OWN_PKGS[@]/#/gvisor.dev/gvisor/}"
