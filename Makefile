# batchd: the two commands a new user needs are `make run` and `make test`.
GO      ?= go
PKGS    := ./...
# rapid's check count per property in `make soak` (`make test` uses rapid's
# default of 100, sized for CI).
CHECKS  ?= 5000
# The cluster properties cost about a quarter second a run (a simulated
# cluster for tens of seconds): 1,000 runs in `make soak`.
CLUSTER_CHECKS ?= 1000

# `make load` flags: RATE req/s for DURATION against URL (open loop).
URL      ?= http://127.0.0.1:8080
RATE     ?= 2000
DURATION ?= 20s

.PHONY: run load test bench sim soak vet build
.PHONY: fidelity scenarios overload poison
.PHONY: gpu-test ptx torch proto opstools cluster

# The live server on its embedded default: 4 emulated devices at 100 ms,
# batches of up to 100, model "echo", on 127.0.0.1:8080; ARGS are more
# serve flags (make run ARGS='--addr 127.0.0.1:9000'). It prints a curl
# line to try; Ctrl-C stops it gracefully (a second Ctrl-C at once). The
# shell execs the binary (not go run, which keeps its child from the
# signal), so a SIGTERM to make reaches batchd too.
ARGS ?=
run:
	CGO_ENABLED=0 $(GO) build -o bin/batchd ./cmd/batchd
	exec bin/batchd serve $(ARGS)

# Three nodes of a cluster on loopback (cluster/local.sh: NODES, DEVICES).
cluster: build
	sh cluster/local.sh

# Open-loop load against a running server (start one with `make run`).
load:
	$(GO) run ./cmd/batchd load --url $(URL) --rate $(RATE) --duration $(DURATION)

sim:
	$(GO) run ./cmd/batchd sim --rate 1000 --devices 6 --batch-max 100 --latency 100ms --duration 60s --seed 7

# Every built-in scenario (scenarios/*.yaml) and cluster scenario
# (scenarios/cluster/*.yaml), the long ones included (the simulated hour at
# 1000 req/s, reference-1h; the 100-node fleet, fleet-100); `make test`
# runs all but those.
scenarios:
	$(GO) test -count=1 -v -run 'TestScenarios|TestClusterScenarios' ./scenarios ./scenarios/gen -args -scenarios.long

build:
	CGO_ENABLED=0 $(GO) build -o bin/batchd ./cmd/batchd

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); echo 'gofmt needed'; exit 1)
	$(GO) vet $(PKGS)
	$(GO) vet -tags hollywood ./engine/ ./engine/generate/

# The live runtime and the HTTP adapter run again under the race detector,
# and the engine and the live generation once more on its second actor
# library (hollywood). First,
# torch: Debian's PyTorch for the worker-process example's end-to-end test,
# installed where apt and root (or sudo -n) allow; where not, that test
# skips and says why. BATCHD_NO_TORCH=1 skips the install. Then the
# operator's tools (opstools below).
test: vet torch opstools
	$(GO) test -count=1 -timeout 8m $(PKGS)
	$(GO) test -race -count=1 -timeout 8m ./engine/... ./cmd/...
	$(GO) test -count=1 -timeout 8m -tags hollywood ./engine/ ./engine/generate/

torch:
	@if [ -n "$(BATCHD_NO_TORCH)" ]; then echo "torch: BATCHD_NO_TORCH set, not installing python3-torch"; \
	else sh engine/workerproc/python/install-torch.sh || echo "torch: not installed; the PyTorch worker example's test will skip"; fi

# The operator's tools, installed where apt and root (or sudo -n) allow:
# Debian's prometheus for promtool, which checks the alert rules
# (engine/httpapi/metrics/alerts.yml), runs their unit tests
# (alerts_test.yml) and parses the Grafana dashboard's queries
# (grafana/batchd.json), and chromium, in which a test loads the status
# page of a live batchd serve (GET /). Where they cannot be installed
# those tests skip and say why. About 6 s each here, with the package
# index present (2.8 s more for apt-get update on a fresh machine).
# BATCHD_NO_OPSTOOLS=1 skips the installs.
opstools:
	@if [ -n "$(BATCHD_NO_OPSTOOLS)" ]; then echo "opstools: BATCHD_NO_OPSTOOLS set, not installing promtool and chromium"; \
	else sh engine/httpapi/metrics/install-promtool.sh || echo "opstools: no promtool; the alert rules' and dashboard's checks will skip"; \
	sh engine/httpapi/install-chromium.sh || echo "opstools: no chromium; the status page's browser test will skip"; fi

bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 3x $(PKGS)

# The simulator's fidelity check against the live server: the same
# workload live (a batchd serve process, real sleeps, real HTTP, the
# open-loop generator) and simulated, first fault-free, then with
# FIDELITY_CRASH_RATE of the batches crashing their device (the one device
# model on both sides); prints the relative error of p50/p95/p99 and
# throughput and fails past 3% (past FIDELITY_FAULT_TARGET % with crashes:
# their p99 rests on the few dozen crashed batches of a minute, drawn from
# different random streams live and simulated). Takes twice
# FIDELITY_DURATION of real time; not part of `make test`. Both sides run
# FIDELITY_CONFIG, a serve configuration (default: the embedded one): live
# as batchd serve --config, simulated as batchd sim --config builds it.
FIDELITY_CONFIG     ?= default
FIDELITY_RATE       ?= 800
FIDELITY_DURATION   ?= 60s
FIDELITY_WARMUP     ?= 5s
FIDELITY_CRASH_RATE ?= 0.02
FIDELITY_FAULT_TARGET ?= 15
# The third run is a cluster: FIDELITY_NODES live nodes of 2 devices that
# batch together on loopback, the load spread over their fronts, against
# the cluster simulator (sim/cluster), all requests and each front side by
# side, past 3% a failure (batchd fidelity --nodes).
FIDELITY_NODES      ?= 3
FIDELITY_FLAGS = --config $(FIDELITY_CONFIG) --rate $(FIDELITY_RATE) --devices 4 --latency 100ms --batch-max 100 --slo 200ms --duration $(FIDELITY_DURATION) --warmup $(FIDELITY_WARMUP)
fidelity: build
	bin/batchd fidelity $(FIDELITY_FLAGS)
	bin/batchd fidelity $(FIDELITY_FLAGS) --crash-rate $(FIDELITY_CRASH_RATE) --target $(FIDELITY_FAULT_TARGET)
	bin/batchd fidelity --nodes $(FIDELITY_NODES) --devices 2 --rate $(FIDELITY_RATE) --latency 100ms --batch-max 100 --slo 200ms --duration $(FIDELITY_DURATION) --warmup $(FIDELITY_WARMUP)

# Hardening checks against a live server (not part of `make test`; they
# take minutes and load both cores). overload: 3x the embedded default's
# capacity, twice in a row, then the recovery at 1,000 req/s and 30 s of
# idle (RATE, DURATION, and VEGETA=path to also run vegeta twice); poison:
# normal traffic beside poison inputs (RATE, DURATION, POISON_RATE).
overload: build
	sh cmd/batchd/overload.sh bin/batchd bin/overload
poison: build
	sh cmd/batchd/poison.sh bin/batchd bin/poison

# The property tests with CHECKS cases each, then the chaos suite longer:
# the malformed-input corpus and the overload five times over, 100,000
# requests on random keys, and FUZZTIME of fuzzing for each request decoder,
# the worker protocol's reply decoder, the node metadata's and the cluster
# data plane's (envelopes and stream frames).
FUZZTIME ?= 60s
soak:
	$(GO) test -count=1 -timeout 60m -run Property ./sim ./actors ./sim/swim ./actors/member -args -rapid.checks=$(CHECKS)
	$(GO) test -count=1 -timeout 60m -run Property ./sim/cluster -args -rapid.checks=$(CLUSTER_CHECKS)
	$(GO) test -count=5 -timeout 20m -run 'TestMalformedCorpus|TestServeOverloadTwice' ./engine/httpapi ./cmd/batchd
	$(GO) test -count=1 -timeout 20m -run TestEngineKeysBounded ./engine -args -keys.requests=100000
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeInfer$$' -fuzztime $(FUZZTIME) ./engine/httpapi
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeFast$$' -fuzztime $(FUZZTIME) ./engine/httpapi
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeV2Binary$$' -fuzztime $(FUZZTIME) ./engine/httpapi
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeMeta$$' -fuzztime $(FUZZTIME) ./cluster
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./cluster/wire
	$(GO) test -run '^$$' -fuzz '^FuzzFrame$$' -fuzztime $(FUZZTIME) ./cluster/wire
	$(GO) test -run '^$$' -fuzz '^FuzzReadReply$$' -fuzztime $(FUZZTIME) ./engine/workerproc

# The GPU check (the model on a GPU against its CPU reference): builds (no
# cgo) the cudabridge test binary and batchd into bin/, then runs
# cudabridge/gpu-test.sh, which records the GPU
# tests (GPU == CPU reference), the latency profile for batch sizes 1..100
# and the GPU vs CPU throughput into GPU_OUT. Without a GPU the GPU tests
# skip, naming what is missing; the binaries and the script can be copied
# to a GPU host and run there. It also builds bin/generate.test, which
# cudabridge/gpu-serve.sh (the live figures: `sh cudabridge/gpu-serve.sh
# bin OUT` on the GPU host) uses for the 256-stream generation figure.
GPU_OUT ?= bin/gpu-results
gpu-test:
	CGO_ENABLED=0 $(GO) test -c -o bin/cudabridge.test ./cudabridge
	CGO_ENABLED=0 $(GO) test -c -o bin/generate.test ./engine/generate
	CGO_ENABLED=0 $(GO) build -o bin/batchd ./cmd/batchd
	sh cudabridge/gpu-test.sh bin $(GPU_OUT)

# Regenerates cudabridge/model.ptx from model.cu with clang (no CUDA
# toolkit needed; nvcc -ptx -arch=sm_80 -fmad=false works too).
CLANG ?= $(shell command -v clang || command -v clang-14)
ptx:
	cd cudabridge && $(CLANG) -x cuda --cuda-device-only --cuda-gpu-arch=sm_80 -nocudainc -nocudalib -O2 -ffp-contract=off -S -o model.ptx model.cu

# Regenerates the OIP gRPC code (engine/grpcapi/oippb/*.pb.go, committed)
# and the cluster data plane's (cluster/wire/*.pb.go, committed) from their
# .proto files: needs protoc (apt-get install protobuf-compiler)
# and the plugins, go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
# google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2, on PATH.
proto:
	cd engine/grpcapi/oippb && PATH="$$PATH:$$($(GO) env GOPATH)/bin" $(GO) generate .
	cd cluster/wire && PATH="$$PATH:$$($(GO) env GOPATH)/bin" $(GO) generate .
