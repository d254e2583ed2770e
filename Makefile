# trainflow: `make test` is the one test command (CI runs it via .ci/run).

GO ?= go
# Packages without the embedded Temporal server: cheap enough to run under
# the race detector on every run. The server's own race build costs ~7 min
# cold on 2 cores; its packages run without -race.
RACE_PKGS = ./console/... ./preprocess/... ./train/... ./serving/... ./workflows/... ./activities/... ./internal/atomicfile/... ./internal/datagen/... ./internal/storage/... ./bundle/... ./jobdir/...

.PHONY: test vet unit race fuzz build demo

test: vet unit race fuzz

# workflowcheck flags non-deterministic code (time, goroutines, map
# ranging, I/O…) reachable from workflow functions. `go run mod@version`
# needs no install step; it analyses source, so it does not depend on our
# SDK version. Mark a checked false positive `//workflowcheck:ignore <why>`.
WORKFLOWCHECK = go.temporal.io/sdk/contrib/tools/workflowcheck@v0.6.0

# examples/custom_model is a module of its own, which ./... skips (its
# test, TestCustomModelExample in cli, builds and runs it).
vet:
	$(GO) vet ./...
	cd examples/custom_model && $(GO) vet ./...
	$(GO) run $(WORKFLOWCHECK) ./workflows/...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi

unit:
	$(GO) test -count=1 -timeout 45m ./...
	cd examples/custom_model && $(GO) test -count=1 ./...

race:
	$(GO) test -count=1 -race -short $(RACE_PKGS)

# Short runs of the request-decoder and layer-stack fuzz targets (seeds
# also run in unit); 3,000 layer stacks take about 10 s.
# The budget is a count, not a duration: with -fuzztime=10s, go1.26's fuzz
# coordinator can report its own deadline as a failure ("context deadline
# exceeded", no failing input) when the workers are starved of CPU
# (golang/go#75804, fixed in go1.27); a count has no deadline to race.
# 20,000 inputs take about 10 s on an idle 2-core machine.
fuzz:
	$(GO) test -run='^$$' -fuzz=FuzzPredictRequest -fuzztime=20000x ./serving/
	$(GO) test -run='^$$' -fuzz=FuzzSequentialShapes -fuzztime=3000x ./train/

build:
	$(GO) build -o trainflow ./cmd/trainflow

demo:
	$(GO) run ./cmd/trainflow dev --demo
