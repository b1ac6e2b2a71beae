# batchd: the two commands a new user needs are `make run` and `make test`.
GO      ?= go
PKGS    := ./...
# rapid's check count per property in `make soak` (`make test` uses rapid's
# default of 100, sized for CI).
CHECKS  ?= 5000

.PHONY: run test bench sim soak vet build

# The main job on its embedded default: the seeds' reference workload
# (1000 req/s Poisson, 6 devices, batches of up to 100 at 100 ms) in the
# deterministic simulator. The live HTTP server arrives with its own issue.
run: sim

sim:
	$(GO) run ./cmd/batchd sim --rate 1000 --devices 6 --batch-max 100 --latency 100ms --duration 60s --seed 7

build:
	CGO_ENABLED=0 $(GO) build -o bin/batchd ./cmd/batchd

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); echo 'gofmt needed'; exit 1)
	$(GO) vet $(PKGS)

test: vet
	$(GO) test -count=1 -timeout 8m $(PKGS)

bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 3x $(PKGS)

soak:
	$(GO) test -count=1 -timeout 60m -run Property ./sim -args -rapid.checks=$(CHECKS)
