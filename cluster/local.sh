#!/bin/sh
# local.sh starts a cluster of batchd nodes on this machine's loopback
# (make cluster): NODES nodes (default 3) of DEVICES emulated devices
# each (default 2), node i serving HTTP on 127.0.0.1:$((HTTP_BASE+i)),
# gossiping on 127.0.0.1:$((GOSSIP_BASE+i)) and taking the other nodes'
# messages on its data plane at 127.0.0.1:$((DATA_BASE+i)), each with its
# own job store under DIR, all sharing a fresh gossip key: each model is
# batched at its owner, whichever front a request comes to. It prints a
# curl line for each front and the cluster's view, and stops every node on
# Ctrl-C or SIGTERM (a graceful leave each, one at a time), exiting 0 when
# every node stopped cleanly. Each node's pid is in DIR/NAME.pid.
# cmd/batchd TestLocalCluster runs it.
set -eu
BIN=${BIN:-bin/batchd}
NODES=${NODES:-3}
DEVICES=${DEVICES:-2}
HTTP_BASE=${HTTP_BASE:-8081}
GOSSIP_BASE=${GOSSIP_BASE:-7946}
DATA_BASE=${DATA_BASE:-7846}
DIR=${DIR:-$(mktemp -d /tmp/batchd-cluster.XXXXXX)}
[ "$NODES" -ge 1 ] && [ "$NODES" -le 16 ] || { echo "NODES=$NODES: want 1 to 16" >&2; exit 2; }
BATCHD_GOSSIP_KEY=$(head -c 32 /dev/urandom | base64)
export BATCHD_GOSSIP_KEY
pids=""
# stop stops the nodes one at a time, the last started first, each
# gracefully (SIGTERM: hand over, drain, leave), so that every leave is
# heard by the nodes still up; it fails if a node did not stop cleanly
# (its log says why).
stop() {
	trap - INT TERM EXIT
	failed=0
	for p in $pids; do
		kill -TERM "$p" 2>/dev/null || continue
		wait "$p" || { echo "node (pid $p) did not stop cleanly: see its log in $DIR" >&2; failed=1; }
	done
	pids=""
	return $failed
}
trap 'stop; exit $?' INT TERM
trap 'stop' EXIT
# Each node in a session of its own (setsid, where there is one), so that
# Ctrl-C reaches only this script, which stops them one at a time (a node
# that got the terminal's SIGINT too would take stop's SIGTERM as a second
# signal: exit at once). A background job is no group leader, so setsid
# runs the node in its own process: $! is the node.
own=""
command -v setsid > /dev/null && own=setsid
i=0
while [ "$i" -lt "$NODES" ]; do
	name=n$i
	join=""
	[ "$i" -gt 0 ] && join="--join 127.0.0.1:$GOSSIP_BASE"
	printf 'cluster:\n  secret_key_env: BATCHD_GOSSIP_KEY\n' > "$DIR/$name.yaml"
	# shellcheck disable=SC2086 # $own is one word or none, $join two or none
	$own "$BIN" serve --config "$DIR/$name.yaml" --node "$name" --devices "$DEVICES" \
		--addr "127.0.0.1:$((HTTP_BASE + i))" --cluster-bind "127.0.0.1:$((GOSSIP_BASE + i))" \
		--data-addr "127.0.0.1:$((DATA_BASE + i))" \
		--data-dir "$DIR/$name" $join > "$DIR/$name.log" 2>&1 &
	pids="$! $pids" # the last started first
	echo "$!" > "$DIR/$name.pid"
	# The first node must be up before the others join it.
	tries=0
	until curl -sf "http://127.0.0.1:$((HTTP_BASE + i))/v2/health/ready" > /dev/null; do
		tries=$((tries + 1))
		if [ "$tries" -gt 100 ]; then echo "node $name did not start; its log:" >&2; cat "$DIR/$name.log" >&2; exit 1; fi
		sleep 0.1
	done
	i=$((i + 1))
done
echo "$NODES nodes up (logs and job stores in $DIR). Their fronts:"
i=0
while [ "$i" -lt "$NODES" ]; do
	echo "  curl -s http://127.0.0.1:$((HTTP_BASE + i))/v1/models/echo/infer -d '{\"input\": \"hello\"}'"
	i=$((i + 1))
done
sleep 1
"$BIN" status --url "http://127.0.0.1:$HTTP_BASE"
echo "(batchd status --url http://127.0.0.1:$HTTP_BASE shows it again; Ctrl-C stops the nodes)"
wait
