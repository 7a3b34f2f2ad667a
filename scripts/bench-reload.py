#!/usr/bin/env python3
"""How long a Kubernetes ConfigMap update takes to be in force, for Sluice in
ENV mode and for envoyproxy/ratelimit alike: both binaries are started with the
same variables on a directory laid out as the kubelet lays out a mounted
ConfigMap; the ..data symlink is swapped to a new version N times, and each
time GET /rlconfig on the debug port is polled until it shows the new limit.

    scripts/bench-reload.py BINARY [SWAPS]

BINARY is run as it is (a Sluice binary must be named ratelimit, or be given
ENV's variables, which it is). Prints the median and 90th percentile in ms.
Used for BENCHMARKS.md, "Envoy configuration reload"."""
import os, shutil, socket, statistics, subprocess, sys, tempfile, time, urllib.request

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def main():
    binary, swaps = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 30
    root = tempfile.mkdtemp(prefix="reload-")
    mount = os.path.join(root, "ratelimit", "config")
    os.makedirs(mount)
    version = [0]
    def swap(limit):
        version[0] += 1
        name = "..v%04d" % version[0]
        os.mkdir(os.path.join(mount, name))
        with open(os.path.join(mount, name, "config.yaml"), "w") as f:
            f.write("domain: reload\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: %d}\n" % limit)
        tmp = os.path.join(mount, "..data_tmp")
        os.symlink(name, tmp)
        os.rename(tmp, os.path.join(mount, "..data"))
        if version[0] > 1:
            shutil.rmtree(os.path.join(mount, "..v%04d" % (version[0] - 1)))
    swap(1)
    os.symlink("..data/config.yaml", os.path.join(mount, "config.yaml"))
    debug = free_port()
    env = {"PATH": "/usr/bin:/bin", "USE_STATSD": "false", "LOG_LEVEL": "error", "RUNTIME_ROOT": root,
           "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_WATCH_ROOT": "false", "RUNTIME_IGNOREDOTFILES": "true",
           "PORT": str(free_port()), "GRPC_PORT": str(free_port()), "DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": str(debug),
           "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": os.environ.get("REDIS_URL", "127.0.0.1:6379")}
    proc = subprocess.Popen([binary], env=env, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    def config():
        try:
            return urllib.request.urlopen("http://127.0.0.1:%d/rlconfig" % debug, timeout=1).read().decode()
        except Exception:
            return ""
    try:
        deadline = time.time() + 20
        while "requests_per_unit=1," not in config():
            if time.time() > deadline or proc.poll() is not None:
                sys.exit("the binary did not load the configuration")
            time.sleep(0.01)
        took = []
        for i in range(swaps):
            limit = i + 2
            start = time.monotonic()
            swap(limit)
            want = "requests_per_unit=%d," % limit
            while want not in config():
                if time.monotonic() - start > 30:
                    sys.exit("swap %d not seen within 30s" % (i + 1))
                time.sleep(0.001)
            took.append((time.monotonic() - start) * 1000)
            time.sleep(0.05)
        took.sort()
        print("%s: %d swaps, median %.1f ms, p90 %.1f ms, max %.1f ms" % (os.path.basename(binary), swaps,
              statistics.median(took), took[int(len(took) * 0.9) - 1], took[-1]))
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(root, ignore_errors=True)

main()
