#!/usr/bin/env python3
"""Cost per check, Sluice against envoyproxy/ratelimit, side by side in one run.

    scripts/bench-vs-env.py [--reps 3] [--duration 10] [--concurrency 64]
                            [--subjects 1000] [--before CHECKOUT] [--http] ENV_BINARY
    scripts/bench-vs-env.py --embedded [--reps 3] [--duration 10] [--concurrency 64]

Both services are started as /bin/ratelimit is started in ENV's own compose
file: a binary named ratelimit, ENV's variables and nothing else (Sluice runs
in ENV mode under that name), the same YAML, and one private redis-server,
shared, so Redis's CPU per check is compared on the same process. The load
is `sluice bench --target envoy` (the closed model: --concurrency callers back
to back over shared gRPC connections), one service at a time, the order
swapped every repetition, for two workloads:

  allow  every check is allowed and counted (a limit that never runs out);
  deny   every subject is spent first, so every check is an OVER_LIMIT.

Per run, CPU is read from /proc/PID/stat (user + system) of the service and
from the Redis's INFO cpu, before and after, and divided by the checks
answered; so are the store calls that decide checks (INFO commandstats:
Sluice's EVALSHA/EVAL script calls, ENV's INCRBYs). Prints each run and then the medians per service and workload with
the ratio Sluice / ENV. With --before, a second Sluice, built from another
checkout (a worktree of an earlier commit), runs in the same rotation, and
the ratios after / before are printed too.

With --http, the HTTP faces instead, on the same Redis and YAML: ENV's
POST /json against Sluice's (in ENV mode, `sluice bench --target envoy-json`),
and against a `sluice serve` (SQLite catalog, same Redis) answering
POST /v1/check for rules of the same limits, whose GET /healthz is measured
after each check run with the same load (the throughput ratio check / healthz).
The serve's CPU is read from its own /metrics (process_cpu_seconds_total,
per run, as `sluice bench` reports it), the others' from /proc.

With --embedded, no ENV and no Redis: one `sluice serve` on its embedded
default (memory store, SQLite catalog) with its Envoy gRPC listener on the
same YAML, and the issue's embedded goal measured on it: CPU per allowed
and denied check over gRPC (`--target envoy`) and over HTTP
(`POST /v1/check`), each against its face's health check on the same
server under the same load (gRPC: grpc.health.v1 Check; HTTP: GET
/healthz), in the same rotation. CPU comes from the server's /metrics, read
around each run and each health check run.

Needs Go (to build Sluice), redis-server and redis-cli. Used for
BENCHMARKS.md, issue 29."""
import argparse, json, os, shutil, statistics, subprocess, sys, tempfile

from benchlib import call as admin_call, free_port, proc_cpu, redis_cpu, redis_info, start_redis, stop, wait

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKEN = "bench-vs-env-admin-token-0123456789"


def store_calls(port, name):
    """Calls that decide checks on the Redis at port: Sluice's script calls,
    ENV's INCRBYs (Redis counts the commands a script runs under their own
    names too, so each service's are counted apart)."""
    n = 0
    for k, v in redis_info(port, "commandstats").items():
        if k in (("cmdstat_incrby",) if name == "env" else ("cmdstat_evalsha", "cmdstat_eval")):
            n += int(dict(x.split("=") for x in v.split(","))["calls"])
    return n


CONFIG = """domain: bench
descriptors:
  - key: allow
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
  - key: deny
    rate_limit: {unit: hour, requests_per_unit: 1}
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("env_binary", nargs="?", help="envoyproxy/ratelimit's binary (not with --embedded)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--duration", type=int, default=10, help="seconds per measured run")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--subjects", type=int, default=1000)
    ap.add_argument("--before", help="a checkout of Sluice to measure beside this one (after / before ratios)")
    ap.add_argument("--http", action="store_true", help="the HTTP faces: ENV's /json against Sluice's /json and POST /v1/check")
    ap.add_argument("--embedded", action="store_true", help="sluice serve on its embedded default: checks against its own /healthz")
    args = ap.parse_args()
    if args.embedded:
        if args.env_binary or args.before or args.http:
            sys.exit("--embedded measures one sluice serve alone: leave out ENV_BINARY, --before and --http")
        embedded_mode(args)
        return
    if not args.env_binary:
        sys.exit("ENV_BINARY is required: the path of an envoyproxy/ratelimit binary (built from its source)")
    if args.http and args.before:
        sys.exit("--before measures the gRPC face; leave it out with --http")
    if not os.access(args.env_binary, os.X_OK):
        sys.exit("%s is not an executable" % args.env_binary)

    work = tempfile.mkdtemp(prefix="bench-vs-env-")
    procs = []
    try:
        print("building sluice...", file=sys.stderr)
        names = ["env", "sluice"] + (["before"] if args.before else [])
        for name in names:
            os.makedirs(os.path.join(work, name))
        subprocess.run(["go", "build", "-o", os.path.join(work, "sluice", "ratelimit"), "./cmd/sluice"], cwd=ROOT, check=True)
        if args.before:
            subprocess.run(["go", "build", "-o", os.path.join(work, "before", "ratelimit"), "./cmd/sluice"],
                           cwd=args.before, check=True)
        bench = os.path.join(work, "sluice-bench")
        shutil.copy(os.path.join(work, "sluice", "ratelimit"), bench)
        shutil.copy(args.env_binary, os.path.join(work, "env", "ratelimit"))
        os.makedirs(os.path.join(work, "config", "ratelimit", "config"))
        with open(os.path.join(work, "config", "ratelimit", "config", "config.yaml"), "w") as f:
            f.write(CONFIG)

        redis, redis_port = start_redis(work)
        procs.append(redis)

        services = {}
        for name in names:
            http, grpc, debug = free_port(), free_port(), free_port()
            env = {"PATH": "/usr/bin:/bin", "USE_STATSD": "false", "LOG_LEVEL": "warn",
                   "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "127.0.0.1:%d" % redis_port,
                   "RUNTIME_ROOT": os.path.join(work, "config"), "RUNTIME_SUBDIRECTORY": "ratelimit",
                   "RUNTIME_WATCH_ROOT": "false", "RUNTIME_IGNOREDOTFILES": "true",
                   "HOST": "127.0.0.1", "PORT": str(http), "GRPC_HOST": "127.0.0.1", "GRPC_PORT": str(grpc),
                   "DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": str(debug)}
            p = subprocess.Popen([os.path.join(work, name, "ratelimit")], env=env, cwd=os.path.join(work, name),
                                 stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, name + ".log"), "w"))
            procs.append(p)
            wait("http://127.0.0.1:%d/healthcheck" % http, p, name)
            services[name] = (p, grpc, http)

        if args.http:
            http_mode(args, work, bench, redis, redis_port, services, procs)
            return

        def run(name, workload):
            p, grpc, _ = services[name]
            cmd = [bench, "bench", "--target", "envoy", "--grpc-addr", "127.0.0.1:%d" % grpc, "--domain", "bench",
                   "--descriptor", workload, "--subject-key", workload, "--subjects", str(args.subjects),
                   "--concurrency", str(args.concurrency), "--duration", "%ds" % args.duration,
                   "--metrics-url", "none", "--reference", "", "--json"]
            cpu0, r0, c0 = proc_cpu(p.pid), redis_cpu(redis_port), store_calls(redis_port, name)
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            cpu1, r1, c1 = proc_cpu(p.pid), redis_cpu(redis_port), store_calls(redis_port, name)
            rep = json.loads(out)[0]  # the run; --reference "" leaves no reference
            answered = rep["allowed"] + rep["denied"]
            if answered == 0 or rep["failed"] or rep["shed"]:
                sys.exit("%s %s: %d answered, %d failed, %d shed: %s" % (name, workload, answered, rep["failed"],
                                                                         rep["shed"], rep.get("first_error", "")))
            want_allowed = workload == "allow"
            if (rep["denied"] > 0) == want_allowed:
                sys.exit("%s %s: %d allowed, %d denied: not the workload" % (name, workload, rep["allowed"], rep["denied"]))
            return {"server_us": (cpu1 - cpu0) / answered * 1e6, "redis_us": (r1 - r0) / answered * 1e6,
                    "per_second": rep["per_second"], "p50_ms": rep["p50_ms"], "p99_ms": rep["p99_ms"],
                    "calls": (c1 - c0) / answered}

        # Every deny subject spent once, on each service's own keys.
        for name in services:
            p, grpc, _ = services[name]
            subprocess.run([bench, "bench", "--target", "envoy", "--grpc-addr", "127.0.0.1:%d" % grpc,
                            "--domain", "bench", "--descriptor", "deny", "--subject-key", "deny",
                            "--subjects", str(args.subjects), "--concurrency", "8", "--duration", "3s",
                            "--metrics-url", "none", "--reference", ""], check=True, capture_output=True)

        results = {}
        print("%-8s %-6s %3s %12s %12s %10s %8s %8s %8s" % ("service", "load", "rep", "server µs", "redis µs", "checks/s", "p50 ms",
                                                          "p99 ms", "calls"))
        for rep in range(args.reps):
            order = names[rep % len(names):] + names[:rep % len(names)]
            for workload in ("allow", "deny"):
                for name in order:
                    r = run(name, workload)
                    results.setdefault((name, workload), []).append(r)
                    print("%-8s %-6s %3d %12.1f %12.1f %10.0f %8.2f %8.2f %8.4f" % (name, workload, rep + 1, r["server_us"],
                          r["redis_us"], r["per_second"], r["p50_ms"], r["p99_ms"], r["calls"]), flush=True)

        print("\nmedians of %d runs (ratios Sluice / ENV):" % args.reps)
        for workload in ("allow", "deny"):
            med = {name: {k: statistics.median(r[k] for r in results[(name, workload)]) for k in results[(name, workload)][0]}
                   for name in ("env", "sluice")}
            e, s = med["env"], med["sluice"]
            print("%-6s server CPU/check: ENV %.1f µs, Sluice %.1f µs (%.2fx); Redis CPU/check: ENV %.1f µs, Sluice %.1f µs (%.2fx); "
                  "p99: ENV %.2f ms, Sluice %.2f ms (%.2fx); throughput %.2fx; store calls/check: ENV %.4f, Sluice %.4f" % (
                      workload, e["server_us"], s["server_us"], s["server_us"] / e["server_us"], e["redis_us"], s["redis_us"],
                      s["redis_us"] / e["redis_us"] if e["redis_us"] else float("nan"), e["p99_ms"], s["p99_ms"],
                      s["p99_ms"] / e["p99_ms"], s["per_second"] / e["per_second"], e["calls"], s["calls"]))
        if args.before:
            print("\nafter / before (medians):")
            for workload in ("allow", "deny"):
                a = {k: statistics.median(r[k] for r in results[("sluice", workload)]) for k in results[("sluice", workload)][0]}
                b = {k: statistics.median(r[k] for r in results[("before", workload)]) for k in results[("before", workload)][0]}
                print("%-6s server CPU/check %.2fx (%.1f -> %.1f µs); Redis CPU/check %.2fx (%.1f -> %.1f µs); p99 %.2fx; throughput %.2fx" % (
                    workload, a["server_us"] / b["server_us"], b["server_us"], a["server_us"], a["redis_us"] / b["redis_us"],
                    b["redis_us"], a["redis_us"], a["p99_ms"] / b["p99_ms"], a["per_second"] / b["per_second"]))
        allow_s = statistics.median(r["server_us"] for r in results[("sluice", "allow")])
        deny_s = statistics.median(r["server_us"] for r in results[("sluice", "deny")])
        print("Sluice deny / allow server CPU: %.2fx" % (deny_s / allow_s))
    finally:
        stop(procs)
        shutil.rmtree(work, ignore_errors=True)


def start_serve(bench, work, procs, flags):
    """A sluice serve with flags (SQLite catalog), a tenant "bench" with a
    check key, and the YAML's two limits as rules; returns (process, URL, key)."""
    port = free_port()
    serve = subprocess.Popen([bench, "serve", "--addr", "127.0.0.1:%d" % port, "--admin-token", TOKEN,
                              "--database", "sqlite://" + os.path.join(work, "catalog.db"), "--console=false"] + flags,
                             stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "serve.log"), "w"))
    procs.append(serve)
    url = "http://127.0.0.1:%d" % port
    wait(url + "/healthz", serve, "sluice serve")
    admin_call(url + "/v1/tenants", "POST", TOKEN, {"name": "bench"})
    key = admin_call(url + "/v1/tenants/bench/keys", "POST", TOKEN, {"name": "bench", "role": "check"})["secret"]
    # The YAML's two limits, as the catalog spells them.
    for name, limit in (("allow", 1000000000), ("deny", 1)):
        admin_call(url + "/v1/tenants/bench/rules/" + name, "PUT", TOKEN, {"route": "/" + name, "limits": [
            {"name": "hour", "algorithm": "fixed_window", "limit": limit, "window": "1h"}]})
    return serve, url, key


def http_mode(args, work, bench, redis, redis_port, services, procs):
    """The HTTP faces side by side; see the module's docstring."""
    # Not the copy named ratelimit: under that name Sluice runs in ENV mode.
    _, url, key = start_serve(bench, work, procs, ["--redis", "redis://127.0.0.1:%d/0" % redis_port])

    def load(name, workload, seconds, concurrency, reference=False):
        common = ["--subjects", str(args.subjects), "--concurrency", str(concurrency), "--duration", "%ds" % seconds, "--json"]
        if name == "serve":
            return [bench, "bench", "--target", "http", "--url", url, "--api-key", key, "--route", "/" + workload,
                    "--reference", "/healthz" if reference else "", "--metrics-url", url + "/metrics"] + common
        http = services[name][2]
        return [bench, "bench", "--target", "envoy-json", "--url", "http://127.0.0.1:%d" % http, "--domain", "bench",
                "--descriptor", workload, "--subject-key", workload, "--metrics-url", "none", "--reference", ""] + common

    def check(name, workload, rep):
        answered = rep["allowed"] + rep["denied"]
        if answered == 0 or rep["failed"] or rep["shed"]:
            sys.exit("%s %s: %d answered, %d failed, %d shed: %s" % (name, workload, answered, rep["failed"],
                                                                     rep["shed"], rep.get("first_error", "")))
        return answered

    def run(name, workload):
        if name == "serve":
            reps = json.loads(subprocess.run(load(name, workload, args.duration, args.concurrency, True),
                                             check=True, capture_output=True, text=True).stdout)
            r, ref = reps[0], reps[1]  # the run, then /healthz under the same load
            check(name, workload, r)
            if "cpu_us_per_check" not in r or "cpu_us_per_check" not in ref:
                sys.exit("sluice serve's CPU was not measured: %s" % r.get("cpu_error", ref.get("cpu_error")))
            return {"server_us": r["cpu_us_per_check"], "per_second": r["per_second"], "p99_ms": r["p99_ms"],
                    "healthz_per_second": ref["per_second"], "healthz_us": ref["cpu_us_per_check"]}
        p = services[name][0]
        cpu0 = proc_cpu(p.pid)
        r = json.loads(subprocess.run(load(name, workload, args.duration, args.concurrency),
                                      check=True, capture_output=True, text=True).stdout)[0]
        cpu1 = proc_cpu(p.pid)
        return {"server_us": (cpu1 - cpu0) / check(name, workload, r) * 1e6, "per_second": r["per_second"], "p99_ms": r["p99_ms"]}

    names = ["env", "sluice", "serve"]
    for name in names:  # every deny subject spent once, on each face's own keys
        subprocess.run(load(name, "deny", 3, 8), check=True, capture_output=True)
    results = {}
    print("%-8s %-6s %3s %12s %10s %8s %14s" % ("service", "load", "rep", "server µs", "checks/s", "p99 ms", "healthz/s"))
    for rep in range(args.reps):
        order = names[rep % len(names):] + names[:rep % len(names)]
        for workload in ("allow", "deny"):
            for name in order:
                r = run(name, workload)
                results.setdefault((name, workload), []).append(r)
                print("%-8s %-6s %3d %12.1f %10.0f %8.2f %14s" % (name, workload, rep + 1, r["server_us"], r["per_second"],
                      r["p99_ms"], "%.0f" % r["healthz_per_second"] if "healthz_per_second" in r else ""), flush=True)

    print("\nmedians of %d runs (env: ENV POST /json; sluice: Sluice POST /json in ENV mode; serve: sluice serve POST /v1/check):" % args.reps)
    for workload in ("allow", "deny"):
        med = {name: {k: statistics.median(r[k] for r in results[(name, workload)]) for k in results[(name, workload)][0]}
               for name in names}
        e, j, c = med["env"], med["sluice"], med["serve"]
        print("%-6s server CPU/check: ENV %.1f µs; Sluice /json %.1f µs (%.2fx); /v1/check %.1f µs (%.2fx); "
              "p99 %.2fx / %.2fx; /v1/check throughput %.2fx /healthz's (CPU %.2fx)" % (
                  workload, e["server_us"], j["server_us"], j["server_us"] / e["server_us"], c["server_us"],
                  c["server_us"] / e["server_us"], j["p99_ms"] / e["p99_ms"], c["p99_ms"] / e["p99_ms"],
                  c["per_second"] / c["healthz_per_second"], c["server_us"] / c["healthz_us"]))


def embedded_mode(args):
    """sluice serve on its embedded default, checks against its own health checks; see the module's docstring."""
    work = tempfile.mkdtemp(prefix="bench-vs-env-")
    procs = []
    try:
        print("building sluice...", file=sys.stderr)
        bench = os.path.join(work, "sluice")
        subprocess.run(["go", "build", "-o", bench, "./cmd/sluice"], cwd=ROOT, check=True)
        os.makedirs(os.path.join(work, "envoy"))
        with open(os.path.join(work, "envoy", "config.yaml"), "w") as f:
            f.write(CONFIG)
        grpc = free_port()
        serve, url, key = start_serve(bench, work, procs, ["--grpc-addr", "127.0.0.1:%d" % grpc,
                                                           "--envoy-config", os.path.join(work, "envoy")])

        def load(face, workload, seconds, concurrency, reference):
            # CPU from the server's own /metrics, read around the run and around
            # its reference separately (`sluice bench` does both).
            common = ["--subjects", str(args.subjects), "--concurrency", str(concurrency), "--duration", "%ds" % seconds,
                      "--metrics-url", url + "/metrics", "--json"]
            if face == "grpc":
                return [bench, "bench", "--target", "envoy", "--grpc-addr", "127.0.0.1:%d" % grpc, "--domain", "bench",
                        "--descriptor", workload, "--subject-key", workload,
                        "--reference", "/healthz" if reference else ""] + common
            return [bench, "bench", "--target", "http", "--url", url, "--api-key", key, "--route", "/" + workload,
                    "--reference", "/healthz" if reference else ""] + common

        def run(face, workload):
            reps = json.loads(subprocess.run(load(face, workload, args.duration, args.concurrency, True),
                                             check=True, capture_output=True, text=True).stdout)
            r, ref = reps[0], reps[1]  # the run, then the reference under the same load
            for x in (r, ref):
                answered = x["allowed"] + x["denied"]
                if answered == 0 or x["failed"] or x["shed"]:
                    sys.exit("%s %s: %d answered, %d failed, %d shed: %s" % (face, workload, answered, x["failed"], x["shed"],
                                                                             x.get("first_error", "")))
                if "cpu_us_per_check" not in x:
                    sys.exit("sluice serve's CPU was not measured: %s" % x.get("cpu_error"))
            return {"server_us": r["cpu_us_per_check"], "per_second": r["per_second"], "p99_ms": r["p99_ms"],
                    "ref_us": ref["cpu_us_per_check"], "ref_per_second": ref["per_second"]}

        faces = ["grpc", "http"]
        for face in faces:  # every deny subject spent once
            subprocess.run(load(face, "deny", 3, 8, False), check=True, capture_output=True)
        results = {}
        print("%-5s %-6s %3s %12s %10s %8s %12s %12s" % ("face", "load", "rep", "server µs", "checks/s", "p99 ms", "health µs", "health/s"))
        for rep in range(args.reps):
            order = faces[rep % 2:] + faces[:rep % 2]
            for workload in ("allow", "deny"):
                for face in order:
                    r = run(face, workload)
                    results.setdefault((face, workload), []).append(r)
                    print("%-5s %-6s %3d %12.1f %10.0f %8.2f %12.1f %12.0f" % (face, workload, rep + 1, r["server_us"],
                          r["per_second"], r["p99_ms"], r["ref_us"], r["ref_per_second"]), flush=True)

        print("\nmedians of %d runs, embedded (memory store); each check against its own face's health check "
              "(grpc: grpc.health.v1 Check; http: GET /healthz), same server, same load:" % args.reps)
        for workload in ("allow", "deny"):
            for face in faces:
                m = {k: statistics.median(r[k] for r in results[(face, workload)]) for k in results[(face, workload)][0]}
                print("%-6s %-4s server CPU/check %.1f µs, health check %.1f µs: %.2fx; throughput %.2fx the health check's; p99 %.2f ms" % (
                    workload, face, m["server_us"], m["ref_us"], m["server_us"] / m["ref_us"],
                    m["per_second"] / m["ref_per_second"], m["p99_ms"]))
    finally:
        stop(procs)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
