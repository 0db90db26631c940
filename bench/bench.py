#!/usr/bin/python3
"""The driver of `make bench` (started by bench/run.sh, which owns the
private redis-server and the private Redis Clusters). For each payload size
it measures, interleaved in one run: the redis-benchmark limit, sluice end
to end (acks on and at-most-once, 1x1 and 2x2), the Python peer (1x1 and
2x2), the latency of next() on a pre-filled queue, sluice over TLS next to
sluice in plain text (--tls-port), and sluice on a partitioned queue in
Redis Clusters of 1, 2 and 3 masters (--clusters). It prints a markdown
report and writes it to --out (bench/results.md).
bench/README.md says what each number means.
"""
import argparse
import datetime
import os
import platform
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PY = "/usr/bin/python3"

KIB, MIB = 1024, 1024 * 1024
SIZES = [KIB, 64 * KIB, MIB, 4 * MIB]

# Per payload size: batches per run of sluice (and of the peer), of
# redis-benchmark, the consumer's prefetch, the producer's max_inflight,
# and the next() latency run (batches, sleep before each next()).
# Small batches want many in flight: the producer sends up to 64 batches
# (or 1 MiB) per transaction and keeps two transactions going, the consumer
# takes up to `prefetch` ids per round trip.
PARAMS = {
    KIB: dict(count=100000, peer_count=12000, limit_count=200000, limit_count_p1=50000,
              prefetch=256, inflight=128, lat_count=3000, lat_sleep_us=100),
    64 * KIB: dict(count=8192, peer_count=4096, limit_count=8192, limit_count_p1=8192,
                   prefetch=32, inflight=32, lat_count=1000, lat_sleep_us=300),
    MIB: dict(count=512, peer_count=256, limit_count=512, limit_count_p1=512,
              prefetch=4, inflight=1, lat_count=200, lat_sleep_us=3000),
    4 * MIB: dict(count=128, peer_count=64, limit_count=128, limit_count_p1=128,
                  prefetch=4, inflight=1, lat_count=60, lat_sleep_us=12000),
}
BUDGET_BYTES = 64 * MIB      # queue byte budget (sluice) = list budget (peer)
BUDGET_BATCHES_MAX = 1024
LIMIT_SETTINGS = [(1, 1), (1, 16)]   # redis-benchmark (-c, -P)
IDLE_MS = 300                # a 2x2 consumer stops after this long without a batch
RUN_TIMEOUT_S = 180
# Cluster scaling: a queue of PARTITIONS_PER_MASTER x masters partitions,
# spread evenly (a fixed count would not be: the slots of "{Q#0}".."{Q#5}"
# differ by fixed XOR patterns, CRC16 being linear, so on two masters that
# split the slots at 8192 six partitions always go 4+2), CLUSTER_TOPO
# producers x consumers in every shape, each producer switching partition
# every max(CHUNK_MIN, max_inflight) batches, or more often when its batches
# would otherwise not go CHUNK_ROUNDS times round the partitions: a
# producer starts at its home partition (from its id, which differs from run
# to run), so with few chunks some partitions, and their masters, get twice
# the share of others (4 MiB: 64 batches a producer, 4 chunks of 16 over 6
# partitions) and the busiest master's CPU per GB measures that split.
PARTITIONS_PER_MASTER = 2
CLUSTER_TOPO = (2, 2)
CHUNK_MIN = 16
CHUNK_ROUNDS = 4


def cluster_chunk(per, inflight, nparts):
    """Batches a producer of `per` batches pushes before moving to the next
    of nparts partitions (bench-produce --chunk)."""
    return max(1, min(max(CHUNK_MIN, inflight), per // (CHUNK_ROUNDS * nparts)))


def crc16(data):
    """CRC16-CCITT (XMODEM), the Redis Cluster key hash."""
    crc = 0
    for b in data:
        crc ^= b << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xffff
    return crc


def key_slot(key):
    """The cluster slot of a key (its hash tag when it has a non-empty one)."""
    k = key.encode()
    i = k.find(b"{")
    if i >= 0:
        j = k.find(b"}", i + 1)
        if j > i + 1:
            k = k[i + 1:j]
    return crc16(k) % 16384


def human(n):
    return "%d KiB" % (n // KIB) if n < MIB else "%d MiB" % (n // MIB)


def budget_batches(size):
    return max(4, min(BUDGET_BATCHES_MAX, BUDGET_BYTES // size))


def kv(line):
    """key=value pairs of a tool's result line -> dict of ints."""
    out = {}
    for tok in line.split()[1:]:
        k, _, v = tok.partition("=")
        out[k] = int(v)
    return out


class Bench:
    def __init__(self, a):
        self.a = a
        self.build = a.build if os.path.isabs(a.build) else os.path.join(ROOT, a.build)
        self.url = "redis://127.0.0.1:%d" % a.port
        # The same server's TLS port; the tools find its CA in the environment.
        self.tls_url = "rediss://127.0.0.1:%d" % a.tls_port if a.tls_port else None
        if a.tls_ca:
            os.environ["SLUICE_TLS_CA_FILE"] = a.tls_ca
        self.nrun = 0
        # masters -> (redis+cluster:// URL, [every node's port])
        self.clusters = {}
        for url in a.clusters.split():
            ports = [int(h.rsplit(":", 1)[1]) for h in url.split("://", 1)[1].strip("/").split(",")]
            self.clusters[len(ports)] = (url, ports)

    # ---- helpers --------------------------------------------------------
    def cli(self, *args, port=None):
        return subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(port or self.a.port)]
                              + list(args), check=True, capture_output=True, text=True).stdout.strip()

    def ctl(self, *args, url=None):
        r = subprocess.run([os.path.join(self.build, "sluice-ctl"), "--redis", url or self.url]
                           + list(args), capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError("sluice-ctl %s: %s" % (" ".join(args), r.stderr.strip()))

    def redis_cpu_by_port(self, ports=None):
        """CPU seconds each server on ports (default: the private server)
        used so far, port -> seconds (INFO cpu: getrusage of the whole
        process, µs resolution; /proc ticks are too coarse for short
        phases)."""
        out = {}
        for port in ports or [self.a.port]:
            info = dict(line.split(":", 1) for line in self.cli("INFO", "cpu", port=port).splitlines()
                        if ":" in line)
            out[port] = float(info["used_cpu_sys"]) + float(info["used_cpu_user"])
        return out

    def redis_cpu_s(self, ports=None):
        """CPU seconds the server (or the servers on ports) used so far."""
        return sum(self.redis_cpu_by_port(ports).values())

    def run_group(self, consumers, producers, until_idle=False, cpu_ports=None, cpu_split=None):
        """Starts the consumers, waits for each to print "ready", starts the
        producers, waits for all (until_idle: then tells the consumers,
        which run with --expect 0, to stop when idle); returns (consumer results, producer
        results, redis CPU seconds, summed over cpu_ports) or raises RuntimeError.
        cpu_split (a dict), when given, gets each port's own CPU seconds."""
        procs = []
        try:
            cons = []
            for cmd in consumers:
                p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                procs.append(p)
                cons.append(p)
                if p.stdout.readline().strip() != "ready":
                    raise RuntimeError("consumer did not start: %s" % p.communicate()[1].strip())
            cpu0 = self.redis_cpu_by_port(cpu_ports)
            prods = []
            for cmd in producers:
                p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                procs.append(p)
                prods.append(p)
            res = []
            for p in prods + cons:
                if until_idle and p is cons[0]:
                    # Every batch is in Redis now: consumers may stop when idle.
                    for c in cons:
                        c.send_signal(signal.SIGUSR1)
                out, err = p.communicate(timeout=RUN_TIMEOUT_S)
                if p.returncode != 0:
                    name = os.path.basename(p.args[1] if p.args[0] == PY else p.args[0])
                    raise RuntimeError("%s exited %d: %s" % (name, p.returncode, err.strip()))
                res.append(kv(out.strip().splitlines()[-1]))
            cpu1 = self.redis_cpu_by_port(cpu_ports)
            used = {port: cpu1[port] - cpu0[port] for port in cpu1}
            if cpu_split is not None:
                cpu_split.update(used)
            return res[len(prods):], res[:len(prods)], sum(used.values())
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()

    @staticmethod
    def summarize(cons, prods, redis_cpu, size, count_total):
        payload = sum(c["payload"] for c in cons)
        if payload != size * count_total:
            raise RuntimeError("consumers got %d payload bytes (%d batches), producers pushed %d"
                               % (payload, sum(c["batches"] for c in cons), size * count_total))
        t0 = min(p["t0_us"] for p in prods)
        t1 = max(c["t_last_us"] for c in cons)
        secs = (t1 - t0) / 1e6
        gb = payload / 1e9
        return dict(
            secs=secs,
            bps=count_total / secs,
            mbs=payload / secs / 1e6,
            pcpu=sum(p["cpu_us"] for p in prods) / 1e6 / gb,
            ccpu=sum(c["cpu_us"] for c in cons) / 1e6 / gb,
            rcpu=redis_cpu / gb,
            prss=max(p["maxrss_kb"] for p in prods) / 1024,
            crss=max(c["maxrss_kb"] for c in cons) / 1024,
            frame=max(c["frame_bytes"] / max(1, c["batches"]) for c in cons),
        )

    # ---- the three systems ----------------------------------------------
    def limit_prefill(self, size):
        """Fills `mylist` with as many values as any limit run pops, so no
        RPOP finds it empty; each run pushes as many as it pops, so the
        length stays. limit_done() deletes it."""
        n = max(PARAMS[size]["limit_count"], PARAMS[size]["limit_count_p1"])
        self.cli("DEL", "mylist")
        subprocess.run(["redis-benchmark", "-h", "127.0.0.1", "-p", str(self.a.port), "-d", str(size),
                        "-n", str(n), "-c", "1", "-P", "16" if size < 64 * KIB else "1",
                        "-t", "lpush", "-q"], check=True, capture_output=True)
        return True

    def limit_done(self):
        self.cli("DEL", "mylist")

    def limit(self, size, nclients, pipeline):
        """redis-benchmark LPUSH and RPOP of size-byte values, concurrently
        on the pre-filled `mylist`. Returns pairs/s = min of the two rates."""
        n = PARAMS[size]["limit_count" if pipeline > 1 else "limit_count_p1"]
        base = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(self.a.port),
                "-d", str(size), "-n", str(n), "-c", str(nclients), "-P", str(pipeline), "--csv"]
        cpu0 = self.redis_cpu_s()
        ps = [subprocess.Popen(base + ["-t", t], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True) for t in ("lpush", "rpop")]
        rates = []
        for p in ps:
            out, err = p.communicate(timeout=RUN_TIMEOUT_S)
            if p.returncode != 0:
                raise RuntimeError("redis-benchmark: %s" % err.strip())
            rates.append(float(out.strip().splitlines()[-1].split(",")[1].strip('"')))
        cpu1 = self.redis_cpu_s()
        pairs = min(rates)
        return dict(bps=pairs, mbs=pairs * size / 1e6, push=rates[0], pop=rates[1],
                    rcpu=(cpu1 - cpu0) / (n * size / 1e9))

    def sluice(self, size, ack, np, nc, url=None):
        """sluice end to end; url (default the plain one) is where the
        producers and consumers connect (the queue is made over the plain
        one)."""
        pr = PARAMS[size]
        url = url or self.url
        self.nrun += 1
        q = "bench%d" % self.nrun
        self.ctl("create", q, "--max-batches", str(budget_batches(size)),
                 "--max-bytes", str(BUDGET_BYTES))
        try:
            per = pr["count"] // np
            cons = [[os.path.join(self.build, "bench-consume"), "--redis", url, "--queue", q,
                     "--prefetch", str(pr["prefetch"]), "--ack", ack,
                     "--expect", str(per * np if nc == 1 else 0), "--idle-ms", str(IDLE_MS)]
                    for _ in range(nc)]
            prods = [[os.path.join(self.build, "bench-produce"), "--redis", url, "--queue", q,
                      "--size", str(size), "--count", str(per), "--inflight", str(pr["inflight"]),
                      "--task", str(i + 1)] for i in range(np)]
            c, p, rc = self.run_group(cons, prods, until_idle=nc > 1)
            r = self.summarize(c, p, rc, size, per * np)
            r["prefetch"] = pr["prefetch"]
            return r
        finally:
            self.ctl("delete", q)

    def cluster_queue(self, masters):
        """A fresh queue name whose PARTITIONS_PER_MASTER x masters
        partitions spread evenly over the masters of the cluster (a
        partition lives on the master of the slot of its hash tag {Q#p});
        returns (name, partitions, partitions per master, the masters'
        ports)."""
        url, ports = self.clusters[masters]
        owner = {}      # slot range -> port, from the masters' own view
        for line in self.cli("CLUSTER", "NODES", port=ports[0]).splitlines():
            f = line.split()
            if "master" not in f[2].split(","):
                continue
            port = int(f[1].split("@")[0].rsplit(":", 1)[1])
            for r in f[8:]:
                if not r.startswith("["):
                    lo, _, hi = r.partition("-")
                    owner[(int(lo), int(hi or lo))] = port

        def node(slot):
            return next(p for (lo, hi), p in owner.items() if lo <= slot <= hi)
        self.nrun += 1
        nparts = PARTITIONS_PER_MASTER * masters
        for k in range(10000):
            name = "cbench%d_%d" % (self.nrun, k)
            count = {}
            for p in range(nparts):
                n = node(key_slot("{%s#%d}" % (name, p)))
                count[n] = count.get(n, 0) + 1
            if len(count) == masters and max(count.values()) - min(count.values()) <= 1:
                # The server must agree with our hash.
                want = key_slot("{%s#0}" % name)
                got = int(self.cli("CLUSTER", "KEYSLOT", "{%s#0}" % name, port=ports[0]))
                if got != want:
                    raise RuntimeError("slot of {%s#0}: ours %d, CLUSTER KEYSLOT %d" % (name, want, got))
                return name, nparts, sorted(count.values(), reverse=True), sorted(set(owner.values()))
        raise RuntimeError("no queue name spreads %d partitions evenly over %d masters"
                           % (nparts, masters))

    def cluster(self, size, masters):
        """sluice (acks on) on a queue of PARTITIONS_PER_MASTER x masters
        partitions in the cluster of `masters` masters, CLUSTER_TOPO
        producers x consumers."""
        pr = PARAMS[size]
        url, ports = self.clusters[masters]
        q, nparts, spread, mports = self.cluster_queue(masters)
        np_, nc = CLUSTER_TOPO
        self.ctl("create", q, "--max-batches", str(budget_batches(size)),
                 "--max-bytes", str(BUDGET_BYTES), "--partitions", str(nparts), url=url)
        try:
            per = pr["count"] // np_
            chunk = cluster_chunk(per, pr["inflight"], nparts)
            cons = [[os.path.join(self.build, "bench-consume"), "--redis", url, "--queue", q,
                     "--prefetch", str(pr["prefetch"]), "--ack", "explicit",
                     "--expect", str(per * np_ if nc == 1 else 0), "--idle-ms", str(IDLE_MS)]
                    for _ in range(nc)]
            prods = [[os.path.join(self.build, "bench-produce"), "--redis", url, "--queue", q,
                      "--size", str(size), "--count", str(per), "--inflight", str(pr["inflight"]),
                      "--task", str(i + 1), "--chunk", str(chunk)]
                     for i in range(np_)]
            split = {}
            c, p, rc = self.run_group(cons, prods, until_idle=nc > 1,
                                      cpu_ports=sorted(set(ports) | set(mports)), cpu_split=split)
            r = self.summarize(c, p, rc, size, per * np_)
            r["spread"] = spread
            r["partitions"] = nparts
            r["chunk"] = chunk
            # Each master's own CPU per GB of the queue's payload: the
            # busiest one is the node that saturates its core first when
            # every node has a core of its own.
            gb = size * per * np_ / 1e9
            busiest = max(split[port] for port in mports)
            r["bcpu"] = busiest / gb
            r["bcores"] = busiest / r["secs"]
            print("   %s, %d master%s: %.0f MB/s, busiest master %.2f CPU s/GB"
                  % (human(size), masters, "s" if masters > 1 else "", r["mbs"], r["bcpu"]),
                  file=sys.stderr, flush=True)
            return r
        finally:
            try:
                self.ctl("delete", q, url=url)
            except RuntimeError as e:
                print("   (could not delete %s: %s)" % (q, e), file=sys.stderr, flush=True)

    def peer(self, size, np, nc):
        pr = PARAMS[size]
        self.nrun += 1
        key = "peer%d" % self.nrun
        per = pr["peer_count"] // np
        port = str(self.a.port)
        cons = [[PY, os.path.join(HERE, "peer_consumer.py"), "--port", port, "--key", key,
                 "--expect", str(per * np if nc == 1 else 0), "--idle-ms", str(IDLE_MS)]
                for _ in range(nc)]
        prods = [[PY, os.path.join(HERE, "peer_producer.py"), "--port", port, "--key", key,
                  "--size", str(size), "--count", str(per), "--budget", str(budget_batches(size)),
                  "--task", str(i + 1)] for i in range(np)]
        try:
            c, p, rc = self.run_group(cons, prods, until_idle=nc > 1)
            return self.summarize(c, p, rc, size, per * np)
        finally:
            self.cli("DEL", key)

    def latency(self, size):
        """next() on a pre-filled queue with a sleep before each call."""
        pr = PARAMS[size]
        self.nrun += 1
        q = "bench%d" % self.nrun
        n = pr["lat_count"]
        self.ctl("create", q, "--max-batches", str(n + 1), "--max-bytes", str((n + 1) * (size + 4096)))
        try:
            cpu0 = self.redis_cpu_s()
            subprocess.run([os.path.join(self.build, "bench-produce"), "--redis", self.url,
                            "--queue", q, "--size", str(size), "--count", str(n),
                            "--inflight", str(pr["inflight"])], check=True, capture_output=True)
            push_cpu = self.redis_cpu_s() - cpu0
            c, _, pop_cpu = self.run_group([[os.path.join(self.build, "bench-consume"), "--redis",
                                       self.url, "--queue", q, "--prefetch", str(pr["prefetch"]),
                                       "--expect", str(n), "--latency-sleep-us",
                                       str(pr["lat_sleep_us"]), "--latency-samples", str(n)]], [])
            return dict(n=c[0]["lat_n"], waited=c[0]["lat_waited"], p50=c[0]["lat_p50_ns"] / 1e3,
                        p99=c[0]["lat_p99_ns"] / 1e3, max=c[0]["lat_max_ns"] / 1e3,
                        prefetch=pr["prefetch"], sleep=pr["lat_sleep_us"],
                        push_us=push_cpu / n * 1e6, pop_us=pop_cpu / n * 1e6)
        finally:
            self.ctl("delete", q)


# ---- the report -----------------------------------------------------------
def median_run(runs):
    """The run whose MB/s is the median of the repetitions (its other
    figures come with it)."""
    runs = sorted(runs, key=lambda r: r["mbs"])
    return runs[(len(runs) - 1) // 2]


def loadavg():
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def fmt(x, nd=0):
    return "-" if x is None else ("%.*f" % (nd, x))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--redis-args", default="")
    ap.add_argument("--out", default=os.path.join(HERE, "results.md"))
    ap.add_argument("--sizes", default=",".join(str(s) for s in SIZES))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="one repetition, a quarter of the data")
    ap.add_argument("--clusters", default="",
                    help="space-separated redis+cluster:// URLs of clusters of 1, 2, 3... masters "
                         "(every node of each), for the cluster scaling part")
    ap.add_argument("--cluster-sizes", help="sizes of the cluster part (default: --sizes)")
    ap.add_argument("--cluster-only", action="store_true",
                    help="only the cluster scaling part (and the single server's run it compares "
                         "with); its section replaces the one in --out")
    ap.add_argument("--tls-port", type=int, help="the private server's TLS port: sluice over "
                    "rediss:// side by side with redis://")
    ap.add_argument("--tls-ca", help="the CA file of the TLS port's certificate")
    ap.add_argument("--tls-only", action="store_true",
                    help="only the TLS part; its section replaces the one in --out")
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    csizes = [int(s) for s in (a.cluster_sizes or a.sizes).split(",")] if a.clusters else []
    if a.cluster_only:
        if not a.clusters:
            ap.error("--cluster-only needs --clusters")
        sizes = []
    if a.tls_only:
        if not a.tls_port:
            ap.error("--tls-only needs --tls-port")
        csizes = []
    for s in sizes + csizes:
        if s not in PARAMS:
            ap.error("size %d: the sizes are %s" % (s, ",".join(str(x) for x in SIZES)))
    if a.quick:
        a.reps = 1
        for p in PARAMS.values():
            for k in ("count", "peer_count", "limit_count", "limit_count_p1", "lat_count"):
                p[k] = max(16, p[k] // 4)
    b = Bench(a)
    started = time.time()
    load0 = loadavg()

    rows = {}       # (size, name) -> list of runs
    lat = {}
    sluice_cfg = [("acks", "explicit", 1, 1), ("acks", "explicit", 2, 2),
                  ("at-most-once", "none", 1, 1), ("at-most-once", "none", 2, 2)]
    failures = []

    def attempt(what, fn, *args):
        """Runs one measurement; a failure (a tool's error, bytes lost) is
        kept for the report and the run goes on."""
        try:
            return fn(*args)
        except (RuntimeError, subprocess.SubprocessError, OSError, KeyError, ValueError) as e:
            failures.append("%s %s: %s" % (human(args[0]), what, e))
            print("   FAILED: %s" % failures[-1], file=sys.stderr, flush=True)
            return None

    def add(key, r):
        rows.setdefault(key, [])
        if r is not None:
            rows[key].append(r)

    for size in sorted(set(sizes) | set(csizes)):
        print("== %s" % human(size), file=sys.stderr, flush=True)
        for rep in range(a.reps):
            if size in csizes:
                for m in sorted(b.clusters):
                    add((size, "cluster", m), attempt("cluster %d masters" % m, b.cluster, size, m))
                if a.cluster_only:
                    # The single server's plain queue that `x single`
                    # compares with, measured in this run too.
                    topo = "%dx%d" % CLUSTER_TOPO
                    add((size, "sluice acks", topo), attempt("sluice acks " + topo, b.sluice, size,
                                                             "explicit", *CLUSTER_TOPO))
            if size not in sizes:
                continue
            if b.tls_url:
                # Plain and TLS in turns, the order swapped every repetition.
                order = [("plain", b.url), ("TLS", b.tls_url)][::1 if rep % 2 == 0 else -1]
                for label, url in order:
                    add((size, "tls", label), attempt("sluice acks 1x1 over " + label, b.sluice,
                                                      size, "explicit", 1, 1, url))
            if a.tls_only:
                continue
            if attempt("limit pre-fill", b.limit_prefill, size):
                for c, pl in LIMIT_SETTINGS:
                    setting = "-c %d -P %d" % (c, pl)
                    add((size, "limit", setting), attempt("limit " + setting, b.limit, size, c, pl))
                b.limit_done()
            for label, ack, np_, nc in sluice_cfg:
                topo = "%dx%d" % (np_, nc)
                add((size, "sluice " + label, topo),
                    attempt("sluice %s %s" % (label, topo), b.sluice, size, ack, np_, nc))
            for np_, nc in ((1, 1), (2, 2)):
                topo = "%dx%d" % (np_, nc)
                add((size, "peer", topo), attempt("peer " + topo, b.peer, size, np_, nc))
            print("   rep %d done (%.0f s)" % (rep + 1, time.time() - started), file=sys.stderr,
                  flush=True)
        if size in sizes and not a.tls_only:
            r = attempt("next() latency", b.latency, size)
            if r is not None:
                lat[size] = r

    load = (load0, loadavg())
    csec = render_cluster(a, csizes, rows, b, failures if a.cluster_only else [])
    tsec = render_tls(a, sizes, rows, failures if a.tls_only else [], load)
    if a.cluster_only or a.tls_only:
        report, heading = (csec, CLUSTER_HEADING) if a.cluster_only else (tsec, TLS_HEADING)
        print(report)
        splice_section(a.out, report, heading)
        print("section replaced in %s" % os.path.relpath(a.out, ROOT), file=sys.stderr)
        return
    report = render(a, sizes, rows, lat, time.time() - started, load, failures, csec + tsec)
    print(report)
    with open(a.out, "w") as f:
        f.write(report)
    print("written to %s" % os.path.relpath(a.out, ROOT), file=sys.stderr)


CLUSTER_HEADING = "## Scaling over Redis Cluster masters"
TLS_HEADING = "## The cost of TLS (rediss://)"


def splice_section(path, section, heading):
    """Replaces the section under heading of the report in path (up to the
    next "## " heading) with section, or adds it at the end."""
    try:
        with open(path) as f:
            lines = f.read().split("\n")
    except FileNotFoundError:
        lines = []
    try:
        i = lines.index(heading)
        j = next((k for k in range(i + 1, len(lines)) if lines[k].startswith("## ")), len(lines))
    except ValueError:
        i = j = len(lines)
    lines[i:j] = section.rstrip("\n").split("\n") + [""]
    with open(path, "w") as f:
        f.write("\n".join(lines))


def failed_list(w, failures):
    """Writes, through w, the list of failed measurements of a section."""
    if failures:
        w("Failed measurements:\n")
        for f_ in failures:
            w("- " + f_)
        w("")


def render_cluster(a, csizes, rows, b, failures):
    """The cluster scaling section: sluice acks on, 2 partitions per master,
    CLUSTER_TOPO, per size and number of masters; x 1 master = ratio of the
    medians to the 1-master figure; Redis capacity x 1 master = the 1-master
    run's busiest-master CPU per GB over this run's. Empty when there was no
    cluster."""
    if not csizes:
        return ""
    med = {k: median_run(v) for k, v in rows.items() if v}
    out = []
    w = out.append
    w(CLUSTER_HEADING + "\n")
    ncpu = os.cpu_count()
    w("- machine: **%d cores** (nproc); every master, producer and consumer shares them%s"
      % (ncpu, ": with more busy processes than cores, end-to-end MB/s measures the machine, not "
         "the cluster, and cannot grow with masters here; what partitioning buys shows in each "
         "master's own CPU cost (the last columns)"
         if ncpu < max(b.clusters) + sum(CLUSTER_TOPO) else ""))
    w("- clusters: %s, private, no replicas, every node `redis-server --cluster-enabled yes %s`; "
      "the idle clusters stay up during every run"
      % (", ".join("%d master%s" % (m, "s" if m > 1 else "") for m in sorted(b.clusters)),
         a.redis_args.strip()))
    w("- queue: %d partitions per master (`sluice-ctl create --partitions`), the queue name chosen "
      "so they spread evenly over the masters; budgets per partition as the single-server queue's; "
      "sluice acks on, %dx%d (producers x consumers); each producer moves to the next partition "
      "every max(%d, max_inflight) batches (`bench-produce --chunk`), or after fewer when its "
      "batches would otherwise go round the partitions fewer than %d times (column `chunk`): it "
      "starts at a home partition that changes from run to run, so with few rounds some masters "
      "would get a larger share than others"
      % (PARTITIONS_PER_MASTER, CLUSTER_TOPO[0], CLUSTER_TOPO[1], CHUNK_MIN, CHUNK_ROUNDS))
    w("- repetitions: %d, the shapes interleaved; each figure is the run with the median MB/s; "
      "`x 1 master` = that median over the 1-master median; `x single` = over the single "
      "server's `sluice acks %dx%d` of this run (plain queue, no cluster); both are measured "
      "end-to-end throughput"
      % (a.reps, CLUSTER_TOPO[0], CLUSTER_TOPO[1]))
    w("- per-master Redis CPU: each node's own CPU seconds (INFO cpu, used_cpu_sys + "
      "used_cpu_user, read before and after the run) per GB of payload; `busiest master CPU "
      "s/GB` is the highest of the masters' (the all-nodes column over the number of masters is "
      "their mean: the two differ by how unevenly the load spread), `busiest master core use` "
      "its CPU seconds over the run's window, first push to last batch received (1.00 = one "
      "core saturated)")
    w("- **`Redis capacity x 1 master`** = busiest master CPU s/GB with 1 master / the same with "
      "this many masters: how much more traffic the cluster could carry than one master before "
      "its busiest node saturates one core, if each node's CPU per GB stays as measured here. "
      "It is a **projection from CPU cost, not a measured throughput**: it is what scales when "
      "every master has a core of its own (and the producers and consumers have theirs), and it "
      "counts only the Redis side")
    w("")
    w("| size | masters | partitions (per master) | chunk | batches/s | MB/s | x 1 master | x single | "
      "prod CPU s/GB | cons CPU s/GB | redis CPU s/GB (all nodes) | busiest master CPU s/GB | "
      "busiest master core use | Redis capacity x 1 master | cons RSS MiB |")
    w("|---|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for s in csizes:
        one = med.get((s, "cluster", 1))
        single = med.get((s, "sluice acks", "%dx%d" % CLUSTER_TOPO))
        for m in sorted(b.clusters):
            v = med.get((s, "cluster", m))
            if not v:
                w("| %s | %d | failed (see below) | | | | | | | | | | | | |" % (human(s), m))
                continue
            w("| %s | %d | %d (%s) | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |"
              % (human(s), m, v["partitions"], "+".join(str(x) for x in v["spread"]), v["chunk"],
                 fmt(v["bps"]),
                 fmt(v["mbs"]),
                 fmt(one and v["mbs"] / one["mbs"], 2), fmt(single and v["mbs"] / single["mbs"], 2),
                 fmt(v["pcpu"], 2), fmt(v["ccpu"], 2), fmt(v["rcpu"], 2), fmt(v["bcpu"], 2),
                 fmt(v["bcores"], 2), fmt(one and v["bcpu"] and one["bcpu"] / v["bcpu"], 2),
                 fmt(v["crss"], 1)))
    w("")
    failed_list(w, failures)
    return "\n".join(out)


def render_tls(a, sizes, rows, failures, load):
    """The TLS section: sluice acks on, 1x1, the same transfer over the
    plain port and the TLS port of one server, per size. Empty without
    --tls-port."""
    if not a.tls_port or not sizes:
        return ""
    med = {k: median_run(v) for k, v in rows.items() if v}
    out = []
    w = out.append
    w(TLS_HEADING + "\n")
    w("sluice acks on, 1 producer x 1 consumer, the same transfer to the same server over its "
      "plain port (`redis://`) and its TLS port (`rediss://`: `redis-server --tls-port`, TLS 1.3, "
      "the server's certificate verified against `SLUICE_TLS_CA_FILE`), in turns, the order "
      "swapped every repetition; %d repetitions, each figure the run with the median MB/s. CPU "
      "s/GB of the producer and the consumer include the TLS relay thread of each (and of "
      "Redis, its own TLS). Load average (1 min) at the start and the end of the run: %s, %s; "
      "with other work on the cores the MB/s of both fall, the CPU per GB holds better.\n"
      % (a.reps, load[0], load[1]))
    w("| size | MB/s plain | MB/s TLS | TLS / plain | prod CPU s/GB plain, TLS | "
      "cons CPU s/GB plain, TLS | redis CPU s/GB plain, TLS |")
    w("|---|--:|--:|--:|--:|--:|--:|")
    for s in sizes:
        pl, tl = med.get((s, "tls", "plain")), med.get((s, "tls", "TLS"))
        if not pl or not tl:
            w("| %s | failed (see below) | | | | | |" % human(s))
            continue
        w("| %s | %s | %s | %s | %s, %s | %s, %s | %s, %s |"
          % (human(s), fmt(pl["mbs"]), fmt(tl["mbs"]), fmt(tl["mbs"] / pl["mbs"], 2),
             fmt(pl["pcpu"], 2), fmt(tl["pcpu"], 2), fmt(pl["ccpu"], 2), fmt(tl["ccpu"], 2),
             fmt(pl["rcpu"], 2), fmt(tl["rcpu"], 2)))
    w("")
    failed_list(w, failures)
    return "\n".join(out)


def render(a, sizes, rows, lat, elapsed, load, failures, cluster_section=""):
    med = {k: median_run(v) for k, v in rows.items() if v}
    out = []
    w = out.append
    redis_ver = subprocess.run(["redis-server", "--version"], capture_output=True,
                               text=True).stdout.split()[2].replace("v=", "")
    cpu = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    head = subprocess.run(["git", "-C", ROOT, "log", "-1", "--format=%h %s"], capture_output=True,
                          text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    w("# sluice benchmark (`make bench`)\n")
    w("- date: %s; run took %.0f s" % (datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), elapsed))
    w("- load average (1 min) at the start and the end: %s, %s%s"
      % (load[0], load[1], "  **(other work shared the cores: absolute figures are low; the "
         "ratios, measured side by side, hold better)**"
         if max(float(load[0]), float(load[1])) > 1.0 + 0.25 * os.cpu_count() else ""))
    w("- machine: %d cores (nproc), %s, Linux %s" % (os.cpu_count(), cpu, platform.release()))
    w("- tree: %s%s" % (head, " (with uncommitted changes)" if dirty else ""))
    w("- Redis %s, private server: `redis-server %s` on loopback TCP" % (redis_ver, a.redis_args.strip()))
    w("- payload: one record per batch of the stated size; a sluice frame adds its header "
      "(column `frame` below), the peer's msgpack map adds ~20 bytes")
    w("- repetitions: %d, interleaved; each figure is the run with the median MB/s" % a.reps)
    w("- budgets: %d MiB and min(%d, %d MiB / size) batches for the sluice queue; the peer's list "
      "is held to the same batch count" % (BUDGET_BYTES // MIB, BUDGET_BATCHES_MAX, BUDGET_BYTES // MIB))
    w("- MB = 10^6 bytes of payload; CPU s/GB = CPU seconds (user+sys, all threads) per 10^9 "
      "payload bytes, summed over the processes of a role (the peer's from its first push / "
      "its `ready`, so interpreter start-up is not billed); redis CPU from INFO cpu; RSS = peak "
      "(VmHWM), max over the processes of a role")
    w("")
    w("| size | frame bytes | per-size settings | batches per run: sluice, peer, redis-benchmark "
      "-P 16, -P 1 |")
    w("|---|--:|---|---|")
    for s in sizes:
        p = PARAMS[s]
        frame = max((v["frame"] for k, v in med.items() if k[0] == s and k[1].startswith("sluice")),
                    default=0)
        w("| %s | %s | prefetch %d, max_inflight %d, budget %d batches | %d, %d, %d, %d |"
          % (human(s), "%.0f" % frame if frame else "-", p["prefetch"], p["inflight"], budget_batches(s), p["count"],
             p["peer_count"], p["limit_count"], p["limit_count_p1"]))
    w("")
    w("## Throughput\n")
    w("`limit` = redis-benchmark LPUSH and RPOP of the same value size run concurrently on "
      "`mylist` (pre-filled so no RPOP finds it empty); pairs/s = min(push rate, pop rate). "
      "`x limit` compares with the best limit setting; `x peer` with the peer of the same "
      "topology (producers x consumers).\n")
    w("| size | system | setting | batches/s | MB/s | x limit | x peer | prod CPU s/GB | "
      "cons CPU s/GB | redis CPU s/GB | prod RSS MiB | cons RSS MiB |")
    w("|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")

    def best(s, name):
        c = [v for k, v in med.items() if k[0] == s and k[1] == name]
        return max(c, key=lambda v: v["mbs"]) if c else None

    def ratio(x, y):
        return x["mbs"] / y["mbs"] if x and y else None

    for s in sizes:
        lim = best(s, "limit")
        for k, v in sorted(med.items(), key=lambda kv_: kv_[0][1] != "limit"):
            if k[0] != s or k[1] in ("cluster", "tls"):
                continue
            if k[1] == "limit":
                w("| %s | limit | %s | %s | %s | %s | | | | %s | | |"
                  % (human(s), k[2], fmt(v["bps"]), fmt(v["mbs"]), fmt(ratio(v, lim), 2),
                     fmt(v["rcpu"], 2)))
                continue
            peer = med.get((s, "peer", k[2])) if k[1] != "peer" else None
            w("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |"
              % (human(s), k[1], k[2], fmt(v["bps"]), fmt(v["mbs"]), fmt(ratio(v, lim), 2),
                 fmt(ratio(v, peer), 1), fmt(v["pcpu"], 2), fmt(v["ccpu"], 2), fmt(v["rcpu"], 2),
                 fmt(v["prss"], 1), fmt(v["crss"], 1)))
    w("")
    if cluster_section:
        w(cluster_section)
    w("## next() when the batch is already prefetched\n")
    w("Pre-filled queue, acks on, a sleep before each next() so the prefetcher is ahead; calls "
      "during which the consumer's blocked_us counter grew (it waited for Redis) are left out "
      "and counted as `waited`.\n")
    w("The same run splits the Redis server's CPU time per batch between the producer's "
      "side (filling the queue: MSET and the push script) and the consumer's (draining it: take, "
      "claim, GET, ack), next to redis-benchmark's LPUSH+RPOP pair at its best setting.\n")
    w("| size | prefetch | sleep µs | samples | waited | median µs | p99 µs | max µs | "
      "redis µs/batch push | redis µs/batch consume | redis µs/pair limit |")
    w("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for s in sizes:
        if s not in lat:
            w("| %s | failed (see below) | | | | | | | | | |" % human(s))
            continue
        l_, lim = lat[s], best(s, "limit")
        w("| %s | %d | %d | %d | %d | %.1f | %.1f | %.1f | %.1f | %.1f | %s |"
          % (human(s), l_["prefetch"], l_["sleep"], l_["n"], l_["waited"], l_["p50"], l_["p99"],
             l_["max"], l_["push_us"], l_["pop_us"], fmt(lim and lim["rcpu"] * s / 1e3, 1)))
    w("")
    w("## Targets\n")
    w("sluice = acks on (the default), the better of 1x1 and 2x2; peer likewise; limit = the "
      "best redis-benchmark setting.\n")
    w("| target | measured | result |")
    w("|---|---|---|")
    for s in sizes:
        sl, lim = best(s, "sluice acks"), best(s, "limit")
        need = 0.5 if s < 64 * KIB else 0.8
        r = ratio(sl, lim)
        w("| %s: sluice >= %d%% of the limit | %s | %s |"
          % (human(s), need * 100,
             "%.0f%% (%.0f of %.0f MB/s)" % (r * 100, sl["mbs"], lim["mbs"]) if r else "no data",
             "PASS" if r and r >= need else "MISS"))
    for s in sizes:
        if s not in (KIB, MIB):
            continue
        sl, pe = best(s, "sluice acks"), best(s, "peer")
        r = ratio(sl, pe)
        w("| %s: sluice >= 3x the peer | %s | %s |"
          % (human(s), "%.1fx (%.0f vs %.0f MB/s)" % (r, sl["mbs"], pe["mbs"]) if r else "no data",
             "PASS" if r and r >= 3 else "MISS"))
    for s in sizes:
        l_ = lat.get(s)
        ok = l_ and l_["n"] and l_["p50"] < 10
        w("| %s: next() median < 10 µs when prefetched | %s | %s |"
          % (human(s), "%.1f µs (p99 %.1f)" % (l_["p50"], l_["p99"]) if l_ else "no data",
             "PASS" if ok else "MISS"))
    for s in sizes:
        worst = max((v for k, v in med.items() if k[0] == s and k[1].startswith("sluice")),
                    key=lambda v: v["crss"], default=None)
        lim = worst and worst["prefetch"] * worst["frame"] / MIB + 16
        w("| %s: consumer RSS <= prefetch x batch + 16 MiB | %s | %s |"
          % (human(s), "%.1f MiB (limit %.1f)" % (worst["crss"], lim) if worst else "no data",
             "PASS" if worst and worst["crss"] <= lim else "MISS"))
    w("")
    if failures:
        w("## Failed measurements\n")
        for f_ in failures:
            w("- " + f_)
        w("")
    return "\n".join(out)


if __name__ == "__main__":
    main()
