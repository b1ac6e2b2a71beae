# Sourced by gpu-serve.sh and gpu-ab.sh: how they share the GPU host's
# cores (the server on the first half, batchd load on the other) and the
# loopback addresses the server listens on (REST, gRPC).
n=$(nproc)
half=$((n / 2))
srv="0-$((half - 1))"
gen="$half-$((n - 1))"
addr=127.0.0.1:18080
gaddr=127.0.0.1:18081
