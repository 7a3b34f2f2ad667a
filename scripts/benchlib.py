"""What the side-by-side benchmark scripts share: ports, process and Redis
CPU, waiting for a service, and the admin API's calls."""
import json, os, socket, subprocess, sys, time, urllib.request

TICK = os.sysconf("SC_CLK_TCK")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def proc_cpu(pid):
    """User + system CPU seconds of pid."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def redis_cli(port, *args):
    return subprocess.run(["redis-cli", "-p", str(port)] + list(args), check=True,
                          capture_output=True, text=True).stdout


def redis_info(port, section):
    return dict(line.split(":", 1) for line in redis_cli(port, "INFO", section).splitlines() if ":" in line)


def redis_cpu(port):
    info = redis_info(port, "cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def start_redis(work):
    """A private redis-server on a free port, answering; returns (process, port)."""
    port = free_port()
    p = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                          "--appendonly", "no", "--dir", work], stdout=subprocess.DEVNULL)
    for _ in range(100):
        try:
            if redis_cli(port, "PING").strip() == "PONG":
                break
        except subprocess.CalledProcessError:
            pass
        time.sleep(0.05)
    return p, port


def wait(url, proc, what, seconds=30):
    """Returns once url answers; exits if proc ends first or it never does."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit("%s exited with %s before answering %s" % (what, proc.returncode, url))
        try:
            urllib.request.urlopen(url, timeout=1).read()
            return
        except Exception:
            time.sleep(0.1)
    sys.exit("%s did not answer %s" % (what, url))


def call(url, method, token, body=None):
    """An admin API call with the operator token; the decoded answer."""
    req = urllib.request.Request(url, method=method, data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read() or b"null")


def stop(procs):
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
