#!/usr/bin/env bash
# Makes sure the real servers the tests talk to are available:
#   - redis-server and redis-cli on PATH (tests start private instances of them);
#   - chromium on PATH, the headless browser of the web console's tests (console/);
#   - node (18+) and python3, which run the clients' suites (clients/);
#   - PostgreSQL reachable at $SLUICE_TEST_POSTGRES (default 127.0.0.1:5432, user
#     postgres, trust auth), where each test creates and drops its own database;
#   - optionally promtool (Debian package prometheus), for deploy/'s alert rule checks.
# On Debian/Ubuntu, as root, missing packages are installed; elsewhere the script
# says what to install and fails.
set -euo pipefail

need_apt=()
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || need_apt+=(redis-tools)
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
# The TypeScript and Python clients' suites (clients/) run under node and python3.
command -v node >/dev/null 2>&1 || need_apt+=(nodejs)
command -v python3 >/dev/null 2>&1 || need_apt+=(python3)

if [ ${#need_apt[@]} -gt 0 ]; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		echo "ensure-test-deps: installing ${need_apt[*]}" >&2
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
	else
		echo "ensure-test-deps: the tests need ${need_apt[*]} (Debian: apt-get install ${need_apt[*]})" >&2
		exit 1
	fi
fi

# Optional: promtool (Debian package prometheus) validates the alert rules in
# deploy/deploy_test.go, which otherwise only parses them and says so. An
# install that fails, or a machine without apt-get, never fails this script.
# Only the promtool binary is used; in a container with the usual
# /usr/sbin/policy-rc.d (exit 101) the package's Prometheus service is not
# started, and no test listens on its port (9090) anyway.
if ! command -v promtool >/dev/null 2>&1; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		echo "ensure-test-deps: installing prometheus (for promtool; optional)" >&2
		if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; } 2>/dev/null; then
			echo "ensure-test-deps: prometheus could not be installed; the deploy tests will not run promtool" >&2
		fi
	else
		echo "ensure-test-deps: promtool not found (Debian: apt-get install prometheus); the deploy tests will not run it" >&2
	fi
fi

pg_url="${SLUICE_TEST_POSTGRES:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}"
pg_ready() {
	if command -v pg_isready >/dev/null 2>&1; then
		pg_isready -q -d "$pg_url"
	else
		# No client tools: a TCP connect is the best check available.
		(exec 3<>/dev/tcp/127.0.0.1/5432) 2>/dev/null
	fi
}
if ! pg_ready; then
	# A local cluster that is installed but stopped can be started here.
	if [ -z "${SLUICE_TEST_POSTGRES:-}" ] && command -v pg_ctlcluster >/dev/null 2>&1 && [ -d /etc/postgresql ]; then
		version="$(ls /etc/postgresql | sort -V | tail -1)"
		echo "ensure-test-deps: starting PostgreSQL $version" >&2
		pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
		for _ in $(seq 1 30); do pg_ready && break; sleep 1; done
	fi
fi
if ! pg_ready; then
	echo "ensure-test-deps: PostgreSQL is not reachable at $pg_url." >&2
	echo "  Start it (Debian: apt-get install postgresql, trust auth for user postgres on 127.0.0.1)," >&2
	echo "  or point SLUICE_TEST_POSTGRES at a server where the tests may create databases." >&2
	exit 1
fi
