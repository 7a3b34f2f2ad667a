#!/usr/bin/env bash
# env-integration.sh ENV_REPO [ENV_BINARY]
#
# Runs envoyproxy/ratelimit's integration scripts (ENV_REPO/integration-test/
# scripts/*.sh, unchanged but for their hosts) through the emulated Envoy of
# internal/envoyemu, as ENV's docker-compose-integration-test.yml runs them
# through a real one: ENV's examples/envoy/proxy.yaml in front, its mock.yaml
# as the upstream, ENV's examples/ratelimit/config as the configuration, a
# statsd_exporter with ENV's mapping for the stats. Once against Sluice,
# started as /bin/ratelimit is started there (a copy of the binary named
# ratelimit, ENV's variables and nothing else: those of the compose file,
# the listeners' ports and STATS_FLUSH_INTERVAL), and once against
# ENV_BINARY when given; each on its own redis-server. Prints each script's
# result per service and the totals.
#
# Options (before ENV_REPO):
#   --skip-sleeps   leave out the scripts that wait 60 s for a window to end
#   --shared-redis  keep the counts of one script for the next, as ENV's
#                   run-all.sh does (by default each script starts on an
#                   empty Redis, as its comments assume)
#   -v              show each script's output
#
# Needs Go, redis-server and redis-cli, curl. ENV's windows are the wall
# clock's minutes, so a script is started at least 10 s before the top of a
# minute: a window ending in the middle of a script is not what it tests.
set -euo pipefail

skip_sleeps=false shared_redis=false verbose=false
while [[ $# -gt 0 && $1 == -* ]]; do
	case $1 in
	--skip-sleeps) skip_sleeps=true ;;
	--shared-redis) shared_redis=true ;;
	-v) verbose=true ;;
	*) echo "env-integration.sh: unknown option $1" >&2; exit 2 ;;
	esac
	shift
done
if [[ $# -lt 1 || $# -gt 2 ]]; then
	echo "usage: scripts/env-integration.sh [--skip-sleeps] [--shared-redis] [-v] ENV_REPO [ENV_BINARY]" >&2
	exit 2
fi
env_repo=$(cd "$1" && pwd)
env_binary=${2:-}
root=$(cd "$(dirname "$0")/.." && pwd)
for f in examples/envoy/proxy.yaml examples/envoy/mock.yaml examples/ratelimit/config examples/prom-statsd-exporter/conf.yaml integration-test/scripts; do
	[[ -e $env_repo/$f ]] || { echo "env-integration.sh: $env_repo/$f is missing: is $env_repo envoyproxy/ratelimit's repository?" >&2; exit 1; }
done
if [[ -n $env_binary && ! -x $env_binary ]]; then
	echo "env-integration.sh: $env_binary is not an executable" >&2
	exit 1
fi

work=$(mktemp -d -t env-integration.XXXXXX)
pids=()
cleanup() {
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT

echo "building sluice, the emulated Envoy and statsd_exporter..."
mkdir -p "$work/sluice" "$work/env" "$work/bin"
(cd "$root" && go build -o "$work/sluice/ratelimit" ./cmd/sluice && go build -o "$work/bin/envoyemu" ./internal/envoyemu/cmd/envoyemu)
exporter_version=$(cd "$root" && go list -m -f '{{.Version}}' github.com/prometheus/statsd_exporter)
GOBIN="$work/bin" go install "github.com/prometheus/statsd_exporter@$exporter_version"
[[ -n $env_binary ]] && cp "$env_binary" "$work/env/ratelimit"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

wait_http() { # url what
	for _ in $(seq 200); do
		curl -fs -o /dev/null "$1" && return 0
		sleep 0.1
	done
	echo "env-integration.sh: $2 did not answer $1" >&2
	return 1
}

# start_stack NAME: redis-server, statsd_exporter, NAME/ratelimit and the two
# emulated Envoys; sets proxy, metrics, redis_port.
start_stack() {
	local name=$1 dir=$work/$1
	redis_port=$(free_port)
	redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no >"$dir/redis.log" 2>&1 &
	pids+=($!)
	local statsd web http grpc debug envoy mock1 mock2
	statsd=$(free_port) web=$(free_port) http=$(free_port) grpc=$(free_port) debug=$(free_port)
	envoy=$(free_port) mock1=$(free_port) mock2=$(free_port)
	"$work/bin/statsd_exporter" --statsd.mapping-config="$env_repo/examples/prom-statsd-exporter/conf.yaml" \
		--statsd.listen-udp=127.0.0.1:"$statsd" --statsd.listen-tcp=127.0.0.1:"$statsd" \
		--web.listen-address=127.0.0.1:"$web" >"$dir/statsd.log" 2>&1 &
	pids+=($!)
	for _ in $(seq 100); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done
	wait_http "http://127.0.0.1:$web/metrics" statsd_exporter
	# ENV's compose file's variables, and its listeners' on free ports;
	# STATS_FLUSH_INTERVAL besides: value-included-in-stats-key-when-
	# unspecified.sh reads the stats 5 s after its requests, and with ENV's
	# default of 10 s a flush falls in those 5 s about half the time, for
	# either service.
	(cd "$dir" && exec env -i PATH=/usr/bin:/bin HOME="$dir" \
		USE_STATSD=true STATSD_HOST=127.0.0.1 STATSD_PORT="$statsd" STATS_FLUSH_INTERVAL=1s LOG_LEVEL=debug \
		REDIS_SOCKET_TYPE=tcp REDIS_URL=127.0.0.1:"$redis_port" \
		RUNTIME_ROOT="$env_repo/examples" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false \
		RESPONSE_DYNAMIC_METADATA=true \
		HOST=127.0.0.1 PORT="$http" GRPC_HOST=127.0.0.1 GRPC_PORT="$grpc" DEBUG_HOST=127.0.0.1 DEBUG_PORT="$debug" \
		./ratelimit >"$dir/ratelimit.log" 2>&1) &
	pids+=($!)
	wait_http "http://127.0.0.1:$http/healthcheck" "$name's /bin/ratelimit"
	# The rate limit filter's timeout is raised from Envoy's 20 ms: a
	# loaded machine's late answer would be a failure allowed through.
	"$work/bin/envoyemu" -c "$env_repo/examples/envoy/mock.yaml" -service-cluster mock \
		-addr 0.0.0.0:9999=127.0.0.1:"$mock1" -addr 0.0.0.0:10001=127.0.0.1:"$mock2" >"$dir/mock.log" 2>&1 &
	pids+=($!)
	"$work/bin/envoyemu" -c "$env_repo/examples/envoy/proxy.yaml" -service-cluster proxy -rls-timeout 2s -v \
		-addr 0.0.0.0:8888=127.0.0.1:"$envoy" -addr ratelimit:8081=127.0.0.1:"$grpc" \
		-addr envoy-mock:9999=127.0.0.1:"$mock1" -addr envoy-mock:10001=127.0.0.1:"$mock2" >"$dir/envoy.log" 2>&1 &
	pids+=($!)
	wait_http "http://127.0.0.1:$mock1/" "the emulated envoy-mock"
	for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$envoy/" && break; sleep 0.1; done
	proxy=127.0.0.1:$envoy metrics=127.0.0.1:$web
}

# before_minute_end: wait until at least 10 s are left of the minute.
before_minute_end() {
	while (( 10#$(date +%S) >= 50 )); do sleep 1; done
}

declare -A result
scripts=()
for f in "$env_repo"/integration-test/scripts/*.sh; do
	if $skip_sleeps && grep -q 'sleep 60' "$f"; then continue; fi
	scripts+=("$(basename "$f")")
done

run_scripts() { # NAME
	local name=$1 dir=$work/$1
	mkdir -p "$dir/scripts"
	for s in "${scripts[@]}"; do
		sed -e "s#envoy-proxy:8888#$proxy#g" -e "s#statsd:9102#$metrics#g" \
			"$env_repo/integration-test/scripts/$s" >"$dir/scripts/$s"
		$shared_redis || redis-cli -p "$redis_port" flushall >/dev/null
		before_minute_end
		if bash "$dir/scripts/$s" >"$dir/scripts/$s.out" 2>&1; then
			result[$name/$s]=pass
		else
			result[$name/$s]=FAIL
		fi
		printf '%-8s %-52s %s\n' "$name" "$s" "${result[$name/$s]}"
		if $verbose || [[ ${result[$name/$s]} == FAIL ]]; then sed 's/^/    | /' "$dir/scripts/$s.out"; fi
	done
}

services=(sluice)
[[ -n $env_binary ]] && services+=(env)
for name in "${services[@]}"; do
	start_stack "$name"
	run_scripts "$name"
done

echo
printf '%-52s' script
for name in "${services[@]}"; do printf ' %-6s' "$name"; done
echo
declare -A passed
for s in "${scripts[@]}"; do
	printf '%-52s' "$s"
	for name in "${services[@]}"; do
		printf ' %-6s' "${result[$name/$s]}"
		[[ ${result[$name/$s]} == pass ]] && passed[$name]=$(( ${passed[$name]:-0} + 1 ))
	done
	echo
done
printf '%-52s' total
status=0
for name in "${services[@]}"; do
	printf ' %-6s' "${passed[$name]:-0}/${#scripts[@]}"
	(( ${passed[$name]:-0} == ${#scripts[@]} )) || status=1
done
echo
exit $status
