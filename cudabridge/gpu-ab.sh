#!/bin/sh
# Side-by-side builds on a GPU host: each round serves --backend cuda with
# each BIN in turn (pinned to the first half of the cores, batchd load on
# the other half, as gpu-serve.sh does) under a closed loop of 1,024
# connections, first over REST then over gRPC streams (DURATION each),
# scraping /metrics around each load; then a CPU profile of the first BIN
# under the same two loads (go tool pprof -tags: the engine's goroutines
# carry a role label), and the net/http yardstick once.
#   sh gpu-ab.sh OUT PROFILE BIN...
# PROFILE is a latency table from `batchd profile --backend cuda --out`;
# each BIN a batchd binary (built here with CGO_ENABLED=0), or
# NAME=BIN,FLAG,... to serve it with those serve flags too (say
# launches=bin/batchd,--cuda-graphs=false beside bin/batchd). OUT gets
# NAME-rR-{rest,grpc}.json (the load reports), NAME-rR-m{0,1,2}.txt (the
# metrics before, between and after), profile.pprof and baseline.json,
# NAME being the given one or the BIN's directory's name.
set -u
out=$1
profile=$2
shift 2
rounds=${ROUNDS:-2}
dur=${DURATION:-10s}
mkdir -p "$out"
. "$(dirname "$0")/gpu-host.sh"

spec() { # BIN or NAME=BIN,FLAG,...: sets name, bin and flags
	s=$1
	name=
	case $s in *=*)
		name=${s%%=*}
		s=${s#*=}
		;;
	esac
	bin=${s%%,*}
	flags=
	case $s in *,*) flags=$(printf %s "${s#*,}" | tr , ' ') ;; esac
	[ -n "$name" ] || name=$(basename "$(dirname "$bin")")
}

serve() { # bin, extra serve flags...
	b=$1
	shift
	taskset -c "$srv" "$b" serve --backend cuda --addr "$addr" --grpc-addr "$gaddr" --latency-table "$profile" "$@" >>"$out/serve.log" 2>&1 &
	pid=$!
	for i in $(seq 100); do
		curl -sf "http://$addr/v2/health/ready" >/dev/null 2>&1 && break
		sleep 0.1
	done
}

loads() { # bin, name
	b=$1
	name=$2
	curl -s "http://$addr/metrics" >"$out/$name-m0.txt"
	taskset -c "$gen" "$b" load --url "http://$addr" --model bytenet --check=false --duration "$dur" --json --connections 1024 --rss-pid "$pid" >"$out/$name-rest.json" 2>/dev/null
	curl -s "http://$addr/metrics" >"$out/$name-m1.txt"
	taskset -c "$gen" "$b" load --url "http://$addr" --model bytenet --check=false --duration "$dur" --json --grpc "$gaddr" --grpc-stream --connections 1024 --rss-pid "$pid" >"$out/$name-grpc.json" 2>/dev/null
	curl -s "http://$addr/metrics" >"$out/$name-m2.txt"
	kill -TERM "$pid"
	wait "$pid"
}

for r in $(seq "$rounds"); do
	for s in "$@"; do
		spec "$s"
		echo "== $name-r$r"
		# shellcheck disable=SC2086
		serve "$bin" $flags
		loads "$bin" "$name-r$r"
	done
done

spec "$1"
first=$bin
echo "== profile of $1"
# shellcheck disable=SC2086
serve "$first" --cpuprofile "$out/profile.pprof" $flags
loads "$first" profiled

echo "== the net/http yardstick"
taskset -c "$srv" "$first" load --baseline-server "$addr" >/dev/null 2>&1 &
pid=$!
sleep 1
taskset -c "$gen" "$first" load --url "http://$addr" --model bytenet --check=false --duration "$dur" --json --connections 1024 --rss-pid "$pid" >"$out/baseline.json" 2>/dev/null
kill -TERM "$pid"
wait "$pid" 2>/dev/null
ls -l "$out"
