#!/usr/bin/env python3
"""A hot key, leased against direct: 4 sluice serve instances on one Redis, side by side.

    scripts/bench-leases.py [--reps 3] [--duration 10] [--concurrency 16] [--instances 4] [--cold] [--rate N] [--bench-procs P] [--profile FILE]
    scripts/bench-leases.py --demand [--limit 2000] [--duration 10] [--shift-at 5] [--reps 3]

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
With --rate N the load is the open model instead: N checks per second offered
in all, N / instances to each instance (`sluice bench --rate`), the same for
both rules, so their p99 compare at one load rather than at each one's
throughput. --bench-procs P runs each load generator with GOMAXPROCS=P (the
same for both rules): a lighter layout on a small machine, where 4 servers
and 4 load generators compete for the cores.

--demand measures a leased fixed window under demand at 4x its limit: one
rule, "lease": "auto" on a fixed_window of --limit per 1 s, one hot key;
every instance is offered --limit checks per second (open model), and at
--shift-at seconds two instances' load stops while the other two get a
second `sluice bench` each at --limit/s (the same total, moved). Each bench
reports its allowed checks by the window their decision named
(allowed_by_window: the decision's reset_after, added to the send and answer
times, brackets the end of its window; the store's windows are Unix seconds
on this machine's clock, shared by Redis and the instances), which is an
exact count per window, and, as a cross-check, by the Unix second each was
sent and answered in (a check sent and answered in one second was decided in
that window: a lower bound; with the ones in flight across a boundary, an
upper bound). Per window: admitted, the share of the limit used, the bounds;
then over-admission (any window over the limit, said loudly), the median and
worst share at steady state (full windows before the shift, from the second
on, and after the first full window past it), the first window after the
shift, the time from the shift until the windows are back at >= 99% of the
limit, the checks that could not be placed (should be 0) and the windows
whose count falls outside the bounds by second (should be none).
Used for BENCHMARKS.md, issue 22."""
import argparse, json, os, re, shutil, statistics, subprocess, sys, tempfile, threading, time, urllib.request

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
    ap.add_argument("--rate", type=float, default=0, help="open model: checks per second offered in all, split across the instances")
    ap.add_argument("--bench-procs", type=int, default=0, help="GOMAXPROCS of each load generator (0: Go's default)")
    ap.add_argument("--profile", default="", help="write a CPU profile of instance 1 during the first leased run to this file")
    ap.add_argument("--demand", action="store_true", help="a leased fixed window under demand at 4x its limit (see above)")
    ap.add_argument("--limit", type=int, default=2000, help="--demand: the fixed window's limit per second")
    ap.add_argument("--trace", action="store_true", help="--demand: scrape every instance's lease and deny-cache counters every 100 ms and print them around the shift")
    ap.add_argument("--shift-at", type=float, default=5, help="--demand: seconds into the run when demand moves between instances (0: no shift)")
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
        pprof = "127.0.0.1:%d" % free_port()
        for i in range(args.instances):
            port = free_port()
            extra = ["--pprof-addr", pprof] if args.profile and i == 0 else []
            p = subprocess.Popen([binary, "serve", "--addr", "127.0.0.1:%d" % port, "--admin-token", TOKEN,
                                  "--redis", "redis://127.0.0.1:%d/0" % redis_port, "--database", dsn, "--console=false"] + extra,
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
        if args.demand:
            admin_call(url + "/v1/tenants/acme/rules/window", "PUT", TOKEN, {"route": "/window", "limits": [
                {"name": "second", "algorithm": "fixed_window", "limit": args.limit, "window": "1s", "lease": "auto"}]})
        time.sleep(2)  # every instance's catalog snapshot has the rules
        if args.demand:
            return demand(args, binary, key, [u for _, u in instances])

        def run(rule):
            keys = ["--subjects", "100000"] if args.cold else ["--hot", "1"]
            rate = ["--rate", "%g" % (args.rate / len(instances))] if args.rate else []
            cmds = [[binary, "bench", "--url", u, "--api-key", key, "--route", "/" + rule] + keys + rate + [
                     "--concurrency", str(args.concurrency), "--duration", "%ds" % args.duration,
                     "--metrics-url", "none", "--reference", "", "--json"] for _, u in instances]
            cpu0 = sum(proc_cpu(p.pid) for p, _ in instances)
            r0, s0 = redis_cpu(redis_port), script_calls(redis_port)
            env = dict(os.environ, GOMAXPROCS=str(args.bench_procs)) if args.bench_procs else None
            running = [subprocess.Popen(c, stdout=subprocess.PIPE, text=True, env=env) for c in cmds]
            prof = None
            if args.profile and rule == "leased" and not profiled:
                profiled.append(rule)
                # The middle of the run, past the leases' warm-up.
                time.sleep(1)
                prof = subprocess.Popen(["curl", "-sfo", args.profile, "http://%s/debug/pprof/profile?seconds=%d" % (pprof, max(1, args.duration - 3))])
            reps = [json.loads(p.communicate()[0])[0] for p in running]
            if prof:
                prof.wait()
            cpu1 = sum(proc_cpu(p.pid) for p, _ in instances)
            r1, s1 = redis_cpu(redis_port), script_calls(redis_port)
            admitted = sum(r["allowed"] for r in reps)
            if admitted == 0 or any(r["failed"] or r["shed"] or r["denied"] or r["dropped"] for r in reps):
                sys.exit("%s: %s" % (rule, reps))
            return {"scripts_per_check": (s1 - s0) / admitted, "server_us": (cpu1 - cpu0) / admitted * 1e6,
                    "redis_us": (r1 - r0) / admitted * 1e6, "per_second": sum(r["per_second"] for r in reps),
                    "p99_ms": max(r["p99_ms"] for r in reps), "p50_ms": max(r["p50_ms"] for r in reps), "late": sum(r["late"] for r in reps)}

        results, profiled = {}, []
        print("%-7s %3s %14s %11s %10s %10s %8s" % ("rule", "rep", "scripts/check", "server µs", "redis µs", "checks/s", "p99 ms"))
        for rep in range(args.reps):
            for rule in (["direct", "leased"] if rep % 2 == 0 else ["leased", "direct"]):
                r = run(rule)
                results.setdefault(rule, []).append(r)
                print("%-7s %3d %14.4f %11.1f %10.1f %10.0f %8.2f" % (rule, rep + 1, r["scripts_per_check"], r["server_us"],
                      r["redis_us"], r["per_second"], r["p99_ms"]), flush=True)
        med = {n: {k: statistics.median(r[k] for r in results[n]) for k in results[n][0]} for n in results}
        d, l = med["direct"], med["leased"]
        if args.rate:
            print("open model: %.0f checks/s offered in all; worst instance's p50 direct %.2f ms, leased %.2f ms (%.2fx); "
                  "late (waited for a sender): direct %d, leased %d (medians)" % (
                      args.rate, d["p50_ms"], l["p50_ms"], l["p50_ms"] / d["p50_ms"], d["late"], l["late"]))
        print("\nmedians of %d runs, leased / direct: script calls per check %.4f / %.4f; server CPU per check %.1f / %.1f µs (%.2fx); "
              "Redis CPU per check %.1f / %.1f µs (%.2fx); throughput %.2fx; p99 %.2f / %.2f ms (%.2fx)" % (
                  args.reps, l["scripts_per_check"], d["scripts_per_check"], l["server_us"], d["server_us"], l["server_us"] / d["server_us"],
                  l["redis_us"], d["redis_us"], l["redis_us"] / d["redis_us"], l["per_second"] / d["per_second"],
                  l["p99_ms"], d["p99_ms"], l["p99_ms"] / d["p99_ms"]))
    finally:
        stop(procs)
        subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-d", "test", "-qc", "DROP DATABASE IF EXISTS " + db])
        shutil.rmtree(work, ignore_errors=True)


def bench_cmd(binary, key, url, rate, seconds):
    return [binary, "bench", "--url", url, "--api-key", key, "--route", "/window", "--hot", "1",
            "--rate", "%g" % rate, "--concurrency", "16", "--duration", "%gs" % seconds,
            "--metrics-url", "none", "--reference", "", "--json"]


TRACED = re.compile(r'^(sluice_quota_lease_units_total\{[^}]*how="(\w+)"[^}]*\}|sluice_deny_cache_hits_total(?:\{[^}]*\})?|sluice_quota_lease_store_calls_saved_total\{[^}]*holder="instance"[^}]*\}) ([0-9.e+]+)$')


def counters(url):
    """An instance's lease unit counters (granted, returned, expired), deny-cache hits and store calls saved."""
    out = {}
    with urllib.request.urlopen(url + "/metrics", timeout=2) as r:
        for line in r.read().decode().splitlines():
            m = TRACED.match(line)
            if m:
                name = m.group(2) or ("deny_hits" if m.group(1).startswith("sluice_deny") else "saved")
                out[name] = out.get(name, 0) + float(m.group(3))
    return out


def tracer(urls, stop_at):
    """Samples every instance's counters every 100 ms until stop_at: [(time, [counters per instance])]."""
    samples = []

    def loop():
        while time.time() < stop_at:
            t = time.time()
            try:
                samples.append((t, [counters(u) for u in urls]))
            except OSError:
                pass
            time.sleep(max(0, 0.1 - (time.time() - t)))
    th = threading.Thread(target=loop, daemon=True)
    th.start()
    return samples, th


def print_trace(samples, t_shift):
    """Per 100 ms around the shift: each instance's units granted, returned and expired, deny-cache hits and checks decided in process."""
    kinds = ("granted", "returned", "expired", "deny_hits", "saved")
    print("trace around the shift (per interval, instances 1-4): " + ", ".join(kinds))
    for (t0, a), (t1, b) in zip(samples, samples[1:]):
        if t_shift - 0.25 <= t1 <= t_shift + 1.25:
            cells = []
            for x, y in zip(a, b):
                cells.append("/".join("%d" % (y.get(k, 0) - x.get(k, 0)) for k in kinds))
            print("  %+6.2f s  %s" % (t1 - t_shift, "   ".join("%-22s" % c for c in cells)))


def demand(args, binary, key, urls):
    """The --demand runs: per-window admitted counts of a leased fixed window at 4x its limit."""
    summary = []
    for rep in range(args.reps):
        # Start on a window boundary plus a little, so windows and the shift line up with seconds.
        time.sleep(1.2 - time.time() % 1)
        t0 = time.time()
        # The shift falls on a window boundary, so the windows after it are wholly after it.
        t_shift = int(t0) + int(args.shift_at) if 0 < args.shift_at < args.duration else 0
        trace = tracer(urls, t0 + args.duration + 0.5) if args.trace else None
        first = [subprocess.Popen(bench_cmd(binary, key, u, args.limit, t_shift - t0 if t_shift and i >= 2 else args.duration),
                                  stdout=subprocess.PIPE, text=True) for i, u in enumerate(urls)]
        second = []
        if t_shift:
            # Started a little early: a process takes some milliseconds to send its first check.
            begin = t_shift - 0.05
            time.sleep(max(0, begin - time.time()))
            second = [subprocess.Popen(bench_cmd(binary, key, u, args.limit, t0 + args.duration - begin),
                                       stdout=subprocess.PIPE, text=True) for u in urls[:2]]
        shift = bool(t_shift)
        reps = [json.loads(p.communicate()[0])[0] for p in first + second]
        if trace:
            trace[1].join()
            if shift:
                print_trace(trace[0], t_shift)
        if any(r["failed"] or r["shed"] or r["dropped"] for r in reps):
            sys.exit("demand: %s" % [{k: v for k, v in r.items() if k not in ("allowed_by_second", "allowed_by_window")} for r in reps])
        # The count: each allowed check in the window its decision named (sluice bench's
        # allowed_by_window, by the decision's reset_after: exact, whatever crossed a boundary in
        # flight). The window ending at second E is labelled by its start, E - 1.
        by_window, unplaced, mismatched = {}, 0, 0
        for r in reps:
            if "allowed_by_window" not in r and r["allowed"]:
                sys.exit("demand: sluice bench did not report allowed_by_window: %s" % r)
            for c in r.get("allowed_by_window", []):
                by_window[c["end"] - 1] = by_window.get(c["end"] - 1, 0) + c["allowed"]
            unplaced += r.get("allowed_unplaced", 0)
            mismatched += r.get("allowed_window_mismatch", 0)
        # The cross-check, by the seconds each allowed check was sent and answered in: one sent and
        # answered in one second was decided in that window (a lower bound of its count); one in
        # flight across a boundary was decided in one of the two (the upper bound counts it in both).
        exact, crossing, came_in = {}, {}, {}
        for r in reps:
            for c in r.get("allowed_by_second", []):
                if c["sent"] == c["answered"]:
                    exact[c["sent"]] = exact.get(c["sent"], 0) + c["allowed"]
                else:
                    for w in range(c["sent"], c["answered"] + 1):
                        crossing[w] = crossing.get(w, 0) + c["allowed"]
                    came_in[c["answered"]] = came_in.get(c["answered"], 0) + c["allowed"]
        first_w, last_w = int(t0) + 1, int(t0 + args.duration) - 1  # the full windows
        print("rep %d: start %.3f, shift at %s; allowed checks not placed in one window: %d; sent and answered in one second but "
              "naming another window: %d" % (rep + 1, t0, t_shift or "none", unplaced, mismatched))
        print("%12s %10s %8s %11s %11s %10s" % ("window", "admitted", "used", "lower bound", "upper bound", "by answer"))
        rows, disagree = {}, []
        for w in range(first_w, last_w + 1):
            n, lo, cr = by_window.get(w, 0), exact.get(w, 0), crossing.get(w, 0)
            rows[w] = n
            if not lo <= n <= lo + cr:
                disagree.append(w)
            print("%12d %10d %7.2f%% %11d %11d %10d%s%s" % (w, n, 100 * n / args.limit, lo, lo + cr, lo + came_in.get(w, 0),
                  "  <- first window after the shift" if shift and w == t_shift else "",
                  "  <- OUTSIDE THE BOUNDS BY SECOND" if w in disagree else ""), flush=True)
        over = [w for w, n in rows.items() if n > args.limit]
        if over:
            print("OVER-ADMISSION: windows %s admitted more than %d" % (over, args.limit), flush=True)
        # Steady state: full windows from the second on, less the first one after the shift.
        steady = [w for w in rows if w >= first_w + 1 and (not shift or w != t_shift)] or list(rows)
        use = [rows[w] / args.limit for w in steady]
        rebalance = None
        if shift:
            # From the shift to the end of the last window below 99% of the limit (0: none was).
            low = [w for w in rows if w >= t_shift and rows[w] < 0.99 * args.limit]
            rebalance = (max(low) + 1 - t_shift) if low else 0.0
        res = {"over": len(over), "max_admitted": max(rows.values()), "median_use": statistics.median(use), "worst_use": min(use),
               "shift_use": rows[t_shift] / args.limit if shift else None, "rebalance_s": rebalance, "unplaced": unplaced, "mismatched": mismatched,
               "disagree": len(disagree), "offered": sum(r["sent"] for r in reps) / args.duration}
        summary.append(res)
        print("windows over the limit: %d; most admitted %d of %d; steady-state use median %.2f%%, worst %.2f%% (%d windows); "
              "the first window after the shift %s; rebalanced within %s of the shift (to the window); unplaced %d; "
              "windows outside the by-second bounds %d; offered %.0f/s" % (
                  res["over"], res["max_admitted"], args.limit, 100 * res["median_use"], 100 * res["worst_use"], len(steady),
                  "%.2f%%" % (100 * res["shift_use"]) if shift else "-", "%.0f s" % rebalance if shift else "(no shift)",
                  unplaced, len(disagree), res["offered"]), flush=True)
    if len(summary) > 1:
        print("\nover %d reps: windows over the limit %d; most admitted %d of %d; median of median use %.2f%%; worst use %.2f%%; "
              "first windows after the shift %s; rebalance times %s; unplaced %d; mismatched %d; windows outside the by-second bounds %d" % (
                  len(summary), sum(r["over"] for r in summary), max(r["max_admitted"] for r in summary), args.limit,
                  100 * statistics.median(r["median_use"] for r in summary), 100 * min(r["worst_use"] for r in summary),
                  ["%.2f%%" % (100 * r["shift_use"]) for r in summary if r["shift_use"] is not None],
                  [r["rebalance_s"] for r in summary], sum(r["unplaced"] for r in summary), sum(r["mismatched"] for r in summary), sum(r["disagree"] for r in summary)))

if __name__ == "__main__":
    main()
