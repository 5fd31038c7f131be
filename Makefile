# Cube build, run and test entry points. Everything runs as root on a fresh
# Debian 12 machine; `make deps` installs what the rest needs.
SHELL := /bin/bash
GO    ?= go
export GOFLAGS := -mod=mod
export PATH := /usr/local/go/bin:$(PATH)

DATA_DIR ?= /var/lib/cube
DEB_PACKAGES := iproute2 nftables iptables debootstrap procps curl ca-certificates \
	python3 python3-ipykernel python3-numpy python3-pandas python3-matplotlib busybox-static \
	libnss-myhostname r-base-core e2fsprogs patch
# What only the tests need on the host: PostgreSQL (a state database of
# their own, started by the tests), PgBouncer (a pooler in front of it for a
# hundred nodes) and the JDK the Java kernel's tests run.
TEST_PACKAGES := postgresql pgbouncer openjdk-17-jdk-headless

GO_BINS := cube-server cubemastercli cube-bench

.PHONY: all build run test deps test-deps install template bench e2e stress soak proto clean console-assets runsc-test

all: build

## build: the six binaries in bin/ (cube-envd, cube-console and runsc static).
build: $(addprefix bin/,$(GO_BINS)) bin/cube-envd bin/cube-console bin/runsc

bin/cube-server bin/cubemastercli bin/cube-bench: FORCE
	$(GO) build -o $@ ./cmd/$(notdir $@)

bin/cube-envd: FORCE
	CGO_ENABLED=0 $(GO) build -o $@ ./cmd/cube-envd

# One console keeper runs per sandbox: a small static binary of its own.
bin/cube-console: FORCE
	CGO_ENABLED=0 $(GO) build -ldflags=-s -o $@ ./cmd/cube-console

# runsc is large and slow to compile; it is rebuilt only when go.mod
# (which pins its pseudo-version) or its build changes. Its seccomp programs
# are precompiled into it (scripts/build-runsc.sh, tools/seccompgen).
bin/runsc: go.mod go.sum scripts/build-runsc.sh tools/seccompgen/main.go $(wildcard scripts/runsc-patches/*.patch)
	GO=$(GO) ./scripts/build-runsc.sh $@

FORCE:

## console-assets: regenerate the web console's bundle (internal/webui/dist,
## committed, embedded in cube-server) from web/console with the pinned
## esbuild and uPlot (needs Node and the npm registry).
console-assets:
	./web/console/build.sh

# install installs the Debian packages of $(1) that are missing.
define install
	@missing=$$(for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing:" $$missing; \
		DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi
endef

## deps: Debian packages the service needs (idempotent).
deps:
	$(call install,$(DEB_PACKAGES))
	@# Names under localhost (the default sandbox domain) resolve to this
	@# machine through nss-myhostname, once it is among the host sources.
	@grep -qE '^hosts:.*\bmyhostname\b' /etc/nsswitch.conf || sed -i -E 's/^(hosts:.*)$$/\1 myhostname/' /etc/nsswitch.conf

## run: install, build, start cube-server on its embedded defaults.
run: deps build
	DATA_DIR=$(DATA_DIR) ./scripts/run.sh

## template: build the default image offline from Debian packages and
## register it on the running server (CUBE_API_URL, default
## http://127.0.0.1:3000) as template code-interpreter with aliases base and
## code-interpreter-v1, then wait for READY. Does nothing when a ready
## template answers to the alias base. The server reads local images only
## from its import directory (IMPORT_DIR): the image is hard-linked there
## when it can be (no copy), and otherwise uploaded by cubemastercli.
DEFAULT_IMAGE ?= /var/cache/cube/default-image.tar
IMPORT_DIR ?= $(DATA_DIR)/imports
template: bin/cubemastercli
	@cli="./bin/cubemastercli"; \
	$$cli tpl list --data-dir $(DATA_DIR) >/dev/null || { echo "template: no Cube server answers at $${CUBE_API_URL:-http://127.0.0.1:3000}; start one with make run" >&2; exit 1; }; \
	if $$cli tpl info --template-id base --data-dir $(DATA_DIR) 2>/dev/null | grep -q '"status": "ready"'; then \
		echo "template: the default template (alias base) is ready"; exit 0; \
	fi; \
	./scripts/default-image.sh $(DEFAULT_IMAGE) || exit 1; \
	image=$(DEFAULT_IMAGE); \
	if ln -f $(DEFAULT_IMAGE) $(IMPORT_DIR)/default-image.tar 2>/dev/null; then image=$(IMPORT_DIR)/default-image.tar; fi; \
	$$cli tpl create-from-image --data-dir $(DATA_DIR) --import-dir $(IMPORT_DIR) --image oci-archive:$$image \
		--template-id code-interpreter --alias base --alias code-interpreter-v1 \
		--expose-port 49983 --expose-port 49999 --probe 49999 --writable-layer-size 1G \
		--cpu 2000 --memory 2048 --wait

## install: a node in place (PREFIX=/usr/local): the binaries, the systemd
## unit cube-server.service (enabled and started when systemd runs), its
## settings in /etc/cube/cube-server.env and data in /var/lib/cube; DESTDIR
## stages it all under a directory instead (scripts/install.sh).
install: deps build
	./scripts/install.sh

## test-deps: what the tests need beyond the service (idempotent).
test-deps: deps
	$(call install,$(TEST_PACKAGES))

## test: the whole suite (unit, gVisor integration, crash, e2e).
test: test-deps build
	./scripts/test.sh

## e2e: the end-to-end suite alone (official SDKs against a private server).
e2e: deps build
	./scripts/e2e.sh

## soak: kill the server at random moments of pauses, write-outs,
## resumes, snapshots, deletes and creates, SOAK times (default 200), and
## check nothing acknowledged is lost and nothing is leaked.
SOAK ?= 200
soak: test-deps build
	GOFLAGS=-mod=mod go test -c -o bin/server.test ./internal/server/
	cd internal/server && env -u E2B_API_KEY CUBE_BIN_DIR=$(CURDIR)/bin CUBE_SOAK_ITERATIONS=$(SOAK) \
		$(CURDIR)/bin/server.test -test.run '^TestSoakRandomKills$$' -test.timeout 0

## stress: the end-to-end suite, then a burst of 200 mixed sandbox
## operations (test/e2e/stress.mjs), each against a private server, while a
## busy loop per core keeps every CPU busy. Not part of make test.
stress: deps build
	./scripts/stress.sh

## bench: every table of the CubeSandbox report against a running server,
## with the raw runsc baseline, into docs/BENCHMARKS.md.
bench: build
	./scripts/bench.sh

## runsc-test: gVisor's own tests of the packages scripts/runsc-patches
## change, on the patched copy, plus the patches' tests. gVisor's module
## has no test files: GVISOR_GIT names a gVisor git repository to take
## them from (GVISOR_REV, default its HEAD). See docs/RUNSC-PATCHES.md.
runsc-test:
	GO=$(GO) ./scripts/runsc-test.sh

## proto: regenerate internal/envd/gen from proto/.
proto:
	./scripts/gen-proto.sh

clean:
	rm -rf bin
