#!/bin/sh
# Runs a Grafana Pyroscope server as sprof's end-to-end tests need one: the
# single binary (-target=all), filesystem storage under DATA_DIR, every
# listener and every ring's instance address on 127.0.0.1 (with the
# container-style default address discovery /ready stays 503), and no
# minimum ready time (30 s otherwise). Queries go to the v2 query backend
# whatever the time range (-enable-query-backend-from): with the default
# "auto" the read path looks for the tenant's oldest profile in the
# metastore, finds none in the first seconds, routes to the v1 path, which
# holds nothing, and the queries time out; the query backend is reached
# at this server's gRPC port, not the default localhost:9095. Nothing leaves the host: no
# usage reports, no self-profiling.
#
#   scripts/pyroscope-server.sh PYROSCOPE_BINARY DATA_DIR [HTTP_PORT [GRPC_PORT [MEMBERLIST_PORT [RAFT_PORT]]]]
#
# Ports default to 4040, 9095, 7946 and 9099. The server runs in the
# foreground (exec), so a caller that started the script holds the
# server's process. The binary is one scripts/pyroscope-build.sh built
# from a checkout of Pyroscope's sources; the agent's real-server test
# takes its path in SPROF_PYROSCOPE_BIN:
#
#   SPROF_PYROSCOPE_BIN=/path/to/pyroscope go test -run RealPyroscope -v ./agent
set -eu

if [ $# -lt 2 ]; then
	echo "usage: $0 PYROSCOPE_BINARY DATA_DIR [HTTP_PORT [GRPC_PORT [MEMBERLIST_PORT [RAFT_PORT]]]]" >&2
	exit 2
fi
bin=$1 dir=$2 http=${3:-4040} grpc=${4:-9095} memberlist=${5:-7946} raft=${6:-9099}
if [ ! -x "$bin" ]; then
	echo "$0: $bin is not an executable Pyroscope server" >&2
	exit 2
fi
mkdir -p "$dir"
# Every ./data default (v1 blocks, metastore, sync dirs) lands in DATA_DIR.
cd "$dir"
addr=127.0.0.1
exec "$bin" \
	-target=all \
	-server.http-listen-address=$addr -server.http-listen-port="$http" \
	-server.grpc-listen-address=$addr -server.grpc-listen-port="$grpc" \
	-storage.backend=filesystem -storage.filesystem.dir="$dir/storage" \
	-memberlist.bind-addr=$addr -memberlist.advertise-addr=$addr -memberlist.bind-port="$memberlist" \
	-metastore.raft.bind-address=$addr:"$raft" -metastore.raft.advertise-address=$addr:"$raft" \
	-metastore.address=$addr:"$grpc" -query-backend.address=$addr:"$grpc" \
	-compactor.ring.instance-addr=$addr \
	-distributor.ring.instance-addr=$addr \
	-ingester.lifecycler.addr=$addr \
	-overrides-exporter.ring.instance-addr=$addr \
	-query-frontend.instance-addr=$addr \
	-query-scheduler.ring.instance-addr=$addr \
	-segment-writer.lifecycler.addr=$addr \
	-store-gateway.sharding-ring.instance-addr=$addr \
	-ingester.min-ready-duration=0s -metastore.min-ready-duration=0s -segment-writer.min-ready-duration=0s \
	-enable-query-backend-from=2000-01-01T00:00:00Z \
	-self-profiling.disable-push=true \
	-usage-stats.enabled=false
