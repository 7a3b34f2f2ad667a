#!/usr/bin/env python3
"""Cost of usage rollups per check: sluice serve with --usage-flush 0 against on, side by side.

    scripts/bench-usage.py [--reps 3] [--duration 10] [--concurrency 64] [--subjects 10000] [--flush 1s]

Two sluice serve processes on the embedded default (memory store, a SQLite
catalog each), the same tenant, key and rule (a fixed window that never runs
out), one with rollups off (--usage-flush 0) and one with them on, flushing
every --flush (default 1s, 60 times serve's default, so the flushes' cost
shows too). The load is `sluice bench --target http` (closed model,
--concurrency callers, --subjects distinct subjects, so the top-subjects sketch keeps replacing),
one service at a time, the order swapped every repetition. Server CPU per
check is read from /proc/PID/stat around each run. Prints each run, then the
medians and the ratios on / off. Used for BENCHMARKS.md, issue 24."""
import argparse, json, os, shutil, statistics, subprocess, sys, tempfile

from benchlib import call as admin_call, free_port, proc_cpu, stop, wait

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKEN = "bench-usage-admin-token-0123456789"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--subjects", type=int, default=10000)
    ap.add_argument("--flush", default="1s", help="--usage-flush of the instance with rollups on")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="bench-usage-")
    procs = []
    try:
        binary = os.path.join(work, "sluice")
        subprocess.run(["go", "build", "-o", binary, "./cmd/sluice"], cwd=ROOT, check=True)
        services = {}
        for name, flush in (("off", "0"), ("on", args.flush)):
            port = free_port()
            os.makedirs(os.path.join(work, name))
            p = subprocess.Popen([binary, "serve", "--addr", "127.0.0.1:%d" % port, "--admin-token", TOKEN,
                                  "--usage-flush", flush, "--console=false", "--database",
                                  "sqlite://" + os.path.join(work, name, "catalog.db")],
                                 stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, name + ".log"), "w"))
            procs.append(p)
            url = "http://127.0.0.1:%d" % port
            wait(url + "/healthz", p, name)
            admin_call(url + "/v1/tenants", "POST", TOKEN, {"name": "acme"})
            key = admin_call(url + "/v1/tenants/acme/keys", "POST", TOKEN, {"name": "bench", "role": "check"})["secret"]
            admin_call(url + "/v1/tenants/acme/rules/api", "PUT", TOKEN, {"route": "/api*", "limits": [
                {"name": "hour", "algorithm": "fixed_window", "limit": 1000000000, "window": "1h"}]})
            services[name] = (p, url, key)

        def run(name):
            p, url, key = services[name]
            cmd = [binary, "bench", "--url", url, "--api-key", key, "--route", "/api/orders",
                   "--subjects", str(args.subjects), "--concurrency", str(args.concurrency),
                   "--duration", "%ds" % args.duration, "--metrics-url", "none", "--reference", "", "--json"]
            cpu0 = proc_cpu(p.pid)
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            cpu1 = proc_cpu(p.pid)
            rep = json.loads(out)[0]
            answered = rep["allowed"] + rep["denied"]
            if answered == 0 or rep["failed"] or rep["shed"] or rep["denied"]:
                sys.exit("%s: %s" % (name, rep))
            return {"server_us": (cpu1 - cpu0) / answered * 1e6, "per_second": rep["per_second"], "p99_ms": rep["p99_ms"]}

        results = {}
        print("%-4s %3s %12s %10s %8s" % ("rollups", "rep", "server µs", "checks/s", "p99 ms"))
        for rep in range(args.reps):
            for name in (["off", "on"] if rep % 2 == 0 else ["on", "off"]):
                r = run(name)
                results.setdefault(name, []).append(r)
                print("%-7s %3d %12.1f %10.0f %8.2f" % (name, rep + 1, r["server_us"], r["per_second"], r["p99_ms"]), flush=True)
        med = {n: {k: statistics.median(r[k] for r in results[n]) for k in results[n][0]} for n in results}
        print("\nmedians of %d runs: server CPU/check off %.1f µs, on %.1f µs (%.3fx); throughput %.3fx; p99 %.2fx" % (
            args.reps, med["off"]["server_us"], med["on"]["server_us"], med["on"]["server_us"] / med["off"]["server_us"],
            med["on"]["per_second"] / med["off"]["per_second"], med["on"]["p99_ms"] / med["off"]["p99_ms"]))
    finally:
        stop(procs)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
