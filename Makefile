# OpenStarry Edge. `make run` starts the appliance, `make test` runs every test.
GO       ?= go
BIN      := bin/openstarry
DATA     ?= ./data
BENCHTIME ?= 300x

.PHONY: build run test torture bench lint matrix clean

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
# (make test runs 200 through 12).
torture:
	OPENSTARRY_TORTURE=1 $(GO) test -count=1 -run 'MQTTCrashRecovery' -v -timeout 60m ./cmd/openstarry/

# Durability figures on the data directory's disk: a raw 4 KiB write +
# fdatasync, Save latency and bytes per backend, end-to-end ticks per second,
# the openai brain's own cost per turn (no model).
bench:
	$(GO) test -run '^$$' -bench 'RawFdatasync|^BenchmarkSave|EndToEnd|DaemonBoot|MQTTIngress|BrainTurn' -benchtime $(BENCHTIME) -timeout 30m ./storage/... ./cmd/openstarry/ ./transport/...

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...

matrix:
	./build.sh matrix

clean:
	rm -rf bin dist
