# OpenStarry Edge. `make run` starts the appliance, `make test` runs every test.
GO       ?= go
BIN      := bin/openstarry
DATA     ?= ./data
BENCHTIME ?= 300x
IMAGE_CACHE ?= $(HOME)/.cache/openstarry/image

.PHONY: build run test torture fleet-sim fuzz bench lint matrix release release-test image image-deps image-test clean

build:
	./build.sh host

run: build
	$(BIN) start --data $(DATA)

# The whole suite: vet, then every package with the race detector. Fuzz
# targets run their seed corpus here; `go test -fuzz` explores further.
test:
	$(GO) vet ./...
	$(GO) test -race -timeout 20m ./...

# The crash tests at length: 3,000 tasks through 150 SIGKILLs over MQTT
# (make test runs 200 through 12), 200 damaged starts per store (make test
# runs 12), and 1,000 cycles of SIGKILL or power cut per store on the
# power-cut simulator (make test runs 30), and 24 self-updates killed at a
# random instant (make test kills 4).
torture:
	OPENSTARRY_TORTURE=1 $(GO) test -count=1 -run 'MQTTCrashRecovery|StoreDamage|PowerCut|UpdateKilled' -v -timeout 90m ./cmd/openstarry/

# The fleet simulation at length: FLEET_SIM_N real daemons (make test runs
# 4) against one Mosquitto loaded with a day's retained claims
# (FLEET_SIM_RETAINED: 17 fleet tasks/s for 24 hours); its figures are in
# docs/fleet.md.
FLEET_SIM_N ?= 100
FLEET_SIM_RETAINED ?= 1500000
fleet-sim:
	OPENSTARRY_FLEET_SIM_N=$(FLEET_SIM_N) OPENSTARRY_FLEET_SIM_RETAINED=$(FLEET_SIM_RETAINED) $(GO) test -count=1 -run 'TestFleetSim' -v -timeout 90m ./cmd/openstarry/

# Every fuzz target explores for FUZZTIME (make test runs only their seed
# corpora, testdata/fuzz included). Findings land in the package's
# testdata/fuzz, where they become part of make test.
FUZZTIME ?= 60s
fuzz:
	@set -e; for f in $$(grep -rl --include='*_test.go' '^func Fuzz' .); do \
	  dir=$$(dirname $$f); \
	  for t in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$f); do \
	    echo "== $$dir $$t"; \
	    $(GO) test -run '^$$' -fuzz "^$$t\$$" -fuzztime $(FUZZTIME) ./$$dir; \
	  done; \
	done

# Durability figures on the data directory's disk: a raw 4 KiB write +
# fdatasync, Save latency and bytes per backend (each against a raw
# fdatasync in the same loop), end-to-end ticks per second, submit-and-wait
# throughput at 1, 8 and 64 clients (in-process), the openai brain's own
# cost per turn (no model), the agent's cost per model turn over a raw
# request to llama-server and the tokens/s it sees (skipped without the
# server: internal/llamaserver/build/build.sh); through the real binary: HTTP and MQTT (embedded
# broker and Mosquitto) latency against a raw fdatasync and throughput at 1,
# 8 and 64 clients, MQTT ingress counted to the results published; and the
# daemon's cold boot (BOOTS boots: each one takes about half a second).
BOOTS ?= 20x
#
# At the end it prints each figure of issue #35's targets beside its
# baseline (internal/benchtargets/targets.json), with the headroom of the
# largest standard and small binaries under their size budgets (the
# windows/amd64 and the small armv6 builds, checked as ./build.sh matrix
# checks them), and fails if any of it failed.
bench:
	{ $(GO) test -run '^$$' -bench 'RawFdatasync|^BenchmarkDatasync|^BenchmarkSave|EndToEnd|InProcessSubmitWait|MQTTIngress|Hydrate|BrainTurn|ModelTurn|BlockBytes' -benchtime $(BENCHTIME) -timeout 30m ./core/agent/ ./storage/... ./cmd/openstarry/ ./transport/... ; \
	  $(GO) test -run '^$$' -bench 'DaemonBoot' -benchtime $(BOOTS) -timeout 30m ./cmd/openstarry/ ; \
	  d=$$(mktemp -d); DIST=$$d TARGETS=windows/amd64 SMALL_TARGETS=linux/arm/6 ./build.sh matrix || echo "FAIL ./build.sh matrix"; rm -rf "$$d" ; \
	} 2>&1 | $(GO) run ./internal/benchtargets

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...

matrix:
	./build.sh matrix

# Every binary, the small (bbolt-only) builds and the .debs into dist/, each
# checked static and under its size budget, SHA256SUMS signed with the
# fleet's key: RELEASE_KEY=fleet.key make release.
release:
	./build.sh release

# The whole release built and checked: every target under qemu or wine,
# the four .debs through lintian (make test checks a short release).
release-test:
	OPENSTARRY_RELEASE_FULL=1 $(GO) test -count=1 -v -timeout 90m ./packaging/

# The arm64 SD-card image, dist/openstarry-VERSION-arm64.img.xz, from
# Debian's packages and the arm64 .deb (docs/install.md). Runs as root;
# image-deps installs what it needs. IMAGE_CACHE keeps the base root file
# system between builds (~/.cache/openstarry/image).
image: image-deps
	CACHE=$(IMAGE_CACHE) packaging/image/image.sh

image-deps:
	packaging/image/deps.sh

# The image built, then booted under qemu-system-aarch64 with a power cut
# (packaging/image/boot_test.go): it prints the boot time and the size.
image-test: image
	OPENSTARRY_IMAGE_TEST=1 $(GO) test -count=1 -v -run 'TestImageBoot' -timeout 90m ./packaging/image/

clean:
	rm -rf bin dist
