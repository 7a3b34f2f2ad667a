#!/usr/bin/env python3
"""A hot key, leased against direct: 4 sluice serve instances on one Redis, side by side.

    scripts/bench-leases.py [--reps 3] [--duration 10] [--concurrency 16] [--instances 4] [--cold]

Four sluice serve processes share one private redis-server and one catalog (a
fresh PostgreSQL database on 127.0.0.1:5432, dropped at the end). Two rules of
one tenant have the same limit, a token bucket that never runs out: "leased"
with "lease": "auto", "direct" without. The load is one `sluice bench
--target http --hot 1` per instance at once (every check on one subject: the
hot key), --concurrency callers each, first on one rule, then on the other,
the order swapped every repetition. With --cold, every check goes to one of
100,000 subjects instead, none hot enough to lease: what leasing costs the
keys it does not serve. Per run: Redis script calls (INFO
commandstats: evalsha + eval) per admitted check, the instances' CPU per
check (/proc, summed), Redis CPU per check, throughput and the worst
instance's p99. Prints each run, then medians and the ratios leased / direct.
Used for BENCHMARKS.md, issue 22."""
import argparse, json, os, shutil, statistics, subprocess, sys, tempfile, time

from benchlib import call as admin_call, free_port, proc_cpu, redis_cpu, redis_info, start_redis, stop, wait

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKEN = "bench-leases-admin-token-0123456789"


def script_calls(port):
    n = 0
    for k, v in redis_info(port, "commandstats").items():
        if k in ("cmdstat_evalsha", "cmdstat_eval"):
            n += int(dict(x.split("=") for x in v.split(","))["calls"])
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--concurrency", type=int, default=16, help="callers per instance")
    ap.add_argument("--instances", type=int, default=4)
    ap.add_argument("--cold", action="store_true", help="100,000 subjects, none hot, instead of one hot key")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="bench-leases-")
    db = "bench_leases_%d" % os.getpid()
    procs = []
    try:
        binary = os.path.join(work, "sluice")
        subprocess.run(["go", "build", "-o", binary, "./cmd/sluice"], cwd=ROOT, check=True)
        subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-d", "test", "-qc", "CREATE DATABASE " + db], check=True)
        dsn = "postgres://postgres@127.0.0.1:5432/%s?sslmode=disable" % db
        redis, redis_port = start_redis(work)
        procs.append(redis)
        instances = []
        for i in range(args.instances):
            port = free_port()
            p = subprocess.Popen([binary, "serve", "--addr", "127.0.0.1:%d" % port, "--admin-token", TOKEN,
                                  "--redis", "redis://127.0.0.1:%d/0" % redis_port, "--database", dsn, "--console=false"],
                                 stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "serve%d.log" % i), "w"))
            procs.append(p)
            url = "http://127.0.0.1:%d" % port
            wait(url + "/healthz", p, "instance %d" % i)
            instances.append((p, url))
        url = instances[0][1]
        admin_call(url + "/v1/tenants", "POST", TOKEN, {"name": "acme"})
        key = admin_call(url + "/v1/tenants/acme/keys", "POST", TOKEN, {"name": "bench", "role": "check"})["secret"]
        bucket = {"name": "burst", "algorithm": "token_bucket", "capacity": 1000000000, "refill_per_second": 1000000}
        admin_call(url + "/v1/tenants/acme/rules/leased", "PUT", TOKEN, {"route": "/leased", "limits": [dict(bucket, lease="auto")]})
        admin_call(url + "/v1/tenants/acme/rules/direct", "PUT", TOKEN, {"route": "/direct", "limits": [bucket]})
        time.sleep(2)  # every instance's catalog snapshot has both rules

        def run(rule):
            keys = ["--subjects", "100000"] if args.cold else ["--hot", "1"]
            cmds = [[binary, "bench", "--url", u, "--api-key", key, "--route", "/" + rule] + keys + [
                     "--concurrency", str(args.concurrency), "--duration", "%ds" % args.duration,
                     "--metrics-url", "none", "--reference", "", "--json"] for _, u in instances]
            cpu0 = sum(proc_cpu(p.pid) for p, _ in instances)
            r0, s0 = redis_cpu(redis_port), script_calls(redis_port)
            running = [subprocess.Popen(c, stdout=subprocess.PIPE, text=True) for c in cmds]
            reps = [json.loads(p.communicate()[0])[0] for p in running]
            cpu1 = sum(proc_cpu(p.pid) for p, _ in instances)
            r1, s1 = redis_cpu(redis_port), script_calls(redis_port)
            admitted = sum(r["allowed"] for r in reps)
            if admitted == 0 or any(r["failed"] or r["shed"] or r["denied"] for r in reps):
                sys.exit("%s: %s" % (rule, reps))
            return {"scripts_per_check": (s1 - s0) / admitted, "server_us": (cpu1 - cpu0) / admitted * 1e6,
                    "redis_us": (r1 - r0) / admitted * 1e6, "per_second": sum(r["per_second"] for r in reps),
                    "p99_ms": max(r["p99_ms"] for r in reps)}

        results = {}
        print("%-7s %3s %14s %11s %10s %10s %8s" % ("rule", "rep", "scripts/check", "server µs", "redis µs", "checks/s", "p99 ms"))
        for rep in range(args.reps):
            for rule in (["direct", "leased"] if rep % 2 == 0 else ["leased", "direct"]):
                r = run(rule)
                results.setdefault(rule, []).append(r)
                print("%-7s %3d %14.4f %11.1f %10.1f %10.0f %8.2f" % (rule, rep + 1, r["scripts_per_check"], r["server_us"],
                      r["redis_us"], r["per_second"], r["p99_ms"]), flush=True)
        med = {n: {k: statistics.median(r[k] for r in results[n]) for k in results[n][0]} for n in results}
        d, l = med["direct"], med["leased"]
        print("\nmedians of %d runs, leased / direct: script calls per check %.4f / %.4f; server CPU per check %.1f / %.1f µs (%.2fx); "
              "Redis CPU per check %.1f / %.1f µs (%.2fx); throughput %.2fx; p99 %.2f / %.2f ms (%.2fx)" % (
                  args.reps, l["scripts_per_check"], d["scripts_per_check"], l["server_us"], d["server_us"], l["server_us"] / d["server_us"],
                  l["redis_us"], d["redis_us"], l["redis_us"] / d["redis_us"], l["per_second"] / d["per_second"],
                  l["p99_ms"], d["p99_ms"], l["p99_ms"] / d["p99_ms"]))
    finally:
        stop(procs)
        subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-d", "test", "-qc", "DROP DATABASE IF EXISTS " + db])
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
