#!/usr/bin/python3
"""The driver of `make bench` (started by bench/run.sh, which owns the
private redis-server and the private Redis Clusters). For each payload size
it measures, interleaved in one run: the redis-benchmark limit (six
settings), sluice end to end (acks on and at-most-once, 1x1 and 2x2), the
plain and the strong Python peer (1x1 and 2x2), sluice and the peers
through a proxy that delays every byte (network latency, $BUILD/delay-proxy),
sluice on queues with and without compression, the latency of next() on a
pre-filled queue, sluice over TLS next to sluice in plain text
(--tls-port), and sluice on a partitioned queue in Redis Clusters of 1, 2
and 3 masters (--clusters). It prints a markdown report (report.py) and
writes it to --out (bench/results.md).
bench/README.md says what each number means.
"""
import argparse
import os
import select
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import report
from params import (KIB, SIZES, PARAMS, COUNT_KEYS, BUDGET_BYTES, LIMIT_SETTINGS,
                    LIMIT_OVERSHOOT, STRONG_PEER_ENV, DELAYS_US, LOOPBACK, DELAY_RUN_MS, COMPRESS_SIZES,
                    CODECS, PARTITIONS_PER_MASTER, CLUSTER_TOPO, CHUNK_MIN, CHUNK_ROUNDS,
                    human, budget_batches, opt, fmnist_payload)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PY = "/usr/bin/python3"

# A consumer that does not know the count (2x2, time-bounded runs) stops
# after this long without a batch, once the producers are done.
IDLE_MS = 300
RUN_TIMEOUT_S = 180


def cluster_chunk(per, inflight, nparts):
    """Batches a producer of `per` batches pushes before moving to the next
    of nparts partitions (bench-produce --chunk)."""
    return max(1, min(max(CHUNK_MIN, inflight or 0), per // (CHUNK_ROUNDS * nparts)))


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


def kv(line):
    """key=value pairs of a tool's result line -> dict of ints (strings
    where a value is not a number)."""
    out = {}
    for tok in line.split()[1:]:
        k, _, v = tok.partition("=")
        out[k] = int(v) if v.lstrip("-").isdigit() else v
    return out


class Bench:
    def __init__(self, a):
        self.a = a
        self.build = a.build if os.path.isabs(a.build) else os.path.join(ROOT, a.build)
        self.url = "redis://127.0.0.1:%d" % a.port
        # The same server's TLS port; the tools find its CA in the environment.
        tls_port = getattr(a, "tls_port", None)
        self.tls_url = "rediss://127.0.0.1:%d" % tls_port if tls_port else None
        if getattr(a, "tls_ca", None):
            os.environ["SLUICE_TLS_CA_FILE"] = a.tls_ca
        # --defaults: the Throughput rows pass no prefetch / max_inflight.
        self.defaults = getattr(a, "defaults", False)
        # How long the producers of a network latency run push.
        self.delay_ms = DELAY_RUN_MS // (4 if getattr(a, "quick", False) else 1)
        self.nrun = 0
        # masters -> (redis+cluster:// URL, [every node's port])
        self.clusters = {}
        for url in getattr(a, "clusters", "").split():
            ports = [int(h.rsplit(":", 1)[1]) for h in url.split("://", 1)[1].strip("/").split(",")]
            self.clusters[len(ports)] = (url, ports)

    # ---- helpers --------------------------------------------------------
    def cli(self, *args, port=None):
        return subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(port or self.a.port)]
                              + list(args), check=True, capture_output=True,
                              text=True).stdout.strip()

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
            info = dict(line.split(":", 1)
                        for line in self.cli("INFO", "cpu", port=port).splitlines() if ":" in line)
            out[port] = float(info["used_cpu_sys"]) + float(info["used_cpu_user"])
        return out

    def redis_cpu_s(self, ports=None):
        """CPU seconds the server (or the servers on ports) used so far."""
        return sum(self.redis_cpu_by_port(ports).values())

    def run_group(self, consumers, producers, until_idle=False, cpu_ports=None, cpu_split=None,
                  env=None):
        """Starts the consumers, waits for each to print "ready", starts the
        producers, waits for all (until_idle: then tells the consumers,
        which run with --expect 0, to stop when idle); returns (consumer results, producer
        results, redis CPU seconds, summed over cpu_ports) or raises RuntimeError.
        cpu_split (a dict), when given, gets each port's own CPU seconds;
        env, when given, is every process's environment."""
        procs = []
        try:
            cons = []
            for cmd in consumers:
                p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env=env)
                procs.append(p)
                cons.append(p)
                if p.stdout.readline().strip() != "ready":
                    raise RuntimeError("consumer did not start: %s" % p.communicate()[1].strip())
            cpu0 = self.redis_cpu_by_port(cpu_ports)
            prods = []
            for cmd in producers:
                p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env=env)
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
            batches=count_total,
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

    # ---- the systems ----------------------------------------------------
    def limit_prefill(self, size):
        """Fills `mylist` with as many values as any limit run pops (and
        redis-benchmark's overshoot past -n), so no RPOP finds it empty;
        each run pushes as many as it pops, so the length stays.
        limit_done() deletes it."""
        n = max(PARAMS[size]["limit_count"], PARAMS[size]["limit_count_p1"]) + LIMIT_OVERSHOOT
        self.cli("DEL", "mylist")
        subprocess.run(["redis-benchmark", "-h", "127.0.0.1", "-p", str(self.a.port),
                        "-d", str(size), "-n", str(n), "-c", "1",
                        "-P", "16" if size < 64 * KIB else "1", "-t", "lpush", "-q"],
                       check=True, capture_output=True)
        return True

    def limit_done(self):
        self.cli("DEL", "mylist")

    def limit(self, size, nclients, pipeline):
        """redis-benchmark LPUSH and RPOP of size-byte values, concurrently
        on the pre-filled `mylist`, each with nclients connections (-n
        split over them) and pipeline commands per round trip. Returns
        pairs/s = min of the two rates."""
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

    def sluice(self, size, ack, np, nc, url=None, defaults=None, count=None, payload=None,
               create=(), duration_ms=None):
        """sluice end to end; url (default the plain one) is where the
        producers and consumers connect (the queue is made over the plain
        one). defaults (None: --defaults) passes no prefetch/max_inflight;
        count (None: PARAMS) batches in all; payload: bench-produce
        --payload (None: random); create: more `sluice-ctl create` options;
        duration_ms: the producers stop after that long (count a cap)."""
        pr = PARAMS[size]
        url = url or self.url
        if defaults is None:
            defaults = self.defaults
        prefetch = None if defaults else pr["prefetch"]
        inflight = None if defaults else pr["inflight"]
        self.nrun += 1
        q = "bench%d" % self.nrun
        self.ctl("create", q, "--max-batches", str(budget_batches(size)),
                 "--max-bytes", str(BUDGET_BYTES), *create)
        try:
            per = (count or pr["count"]) // np
            # Consumers that know the count stop at it; else when idle.
            idle = nc > 1 or duration_ms is not None
            cons = [[os.path.join(self.build, "bench-consume"), "--redis", url, "--queue", q,
                     "--ack", ack, "--expect", str(0 if idle else per * np),
                     "--idle-ms", str(IDLE_MS)] + opt("--prefetch", prefetch)
                    for _ in range(nc)]
            prods = [[os.path.join(self.build, "bench-produce"), "--redis", url, "--queue", q,
                      "--size", str(size), "--count", str(per), "--task", str(i + 1)]
                     + opt("--inflight", inflight) + opt("--payload", payload)
                     + opt("--duration-ms", duration_ms) for i in range(np)]
            c, p, rc = self.run_group(cons, prods, until_idle=idle)
            r = self.summarize(c, p, rc, size, sum(x["batches"] for x in p))
            r["prefetch"] = prefetch
            r["payload_kind"] = p[0].get("payload_kind")
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
                    raise RuntimeError("slot of {%s#0}: ours %d, CLUSTER KEYSLOT %d"
                                       % (name, want, got))
                return (name, nparts, sorted(count.values(), reverse=True),
                        sorted(set(owner.values())))
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
                     "--ack", "explicit", "--expect", str(per * np_ if nc == 1 else 0),
                     "--idle-ms", str(IDLE_MS)] + opt("--prefetch", pr["prefetch"])
                    for _ in range(nc)]
            prods = [[os.path.join(self.build, "bench-produce"), "--redis", url, "--queue", q,
                      "--size", str(size), "--count", str(per), "--task", str(i + 1),
                      "--chunk", str(chunk)] + opt("--inflight", pr["inflight"])
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

    def peer(self, size, np, nc, strong=False, port=None, count=None, duration_ms=None):
        """The Python peer (strong: the strong one, with glibc's malloc
        thresholds raised) on a list of the private server, reached on
        port (default: the server's own); duration_ms: the producers stop
        after that long (count a cap)."""
        pr = PARAMS[size]
        self.nrun += 1
        key = "peer%d" % self.nrun
        per = (count or pr["strong_count" if strong else "peer_count"]) // np
        port = str(port or self.a.port)
        mode = ["--strong"] if strong else []
        idle = nc > 1 or duration_ms is not None
        cons = [[PY, os.path.join(HERE, "peer_consumer.py"), "--port", port, "--key", key,
                 "--expect", str(0 if idle else per * np), "--idle-ms", str(IDLE_MS)] + mode
                for _ in range(nc)]
        prods = [[PY, os.path.join(HERE, "peer_producer.py"), "--port", port, "--key", key,
                  "--size", str(size), "--count", str(per), "--budget", str(budget_batches(size)),
                  "--task", str(i + 1)] + mode + opt("--duration-ms", duration_ms)
                 for i in range(np)]
        env = dict(os.environ, **STRONG_PEER_ENV) if strong else None
        try:
            c, p, rc = self.run_group(cons, prods, until_idle=idle, env=env)
            r = self.summarize(c, p, rc, size, sum(x["batches"] for x in p))
            r["hiredis"] = min(x["hiredis"] for x in c + p)
            return r
        finally:
            self.cli("DEL", key)

    def latency(self, size):
        """next() on a pre-filled queue with a sleep before each call."""
        pr = PARAMS[size]
        self.nrun += 1
        q = "bench%d" % self.nrun
        n = pr["lat_count"]
        self.ctl("create", q, "--max-batches", str(n + 1),
                 "--max-bytes", str((n + 1) * (size + 4096)))
        try:
            cpu0 = self.redis_cpu_s()
            subprocess.run([os.path.join(self.build, "bench-produce"), "--redis", self.url,
                            "--queue", q, "--size", str(size), "--count", str(n)]
                           + opt("--inflight", pr["inflight"]), check=True, capture_output=True)
            push_cpu = self.redis_cpu_s() - cpu0
            c, _, pop_cpu = self.run_group([[os.path.join(self.build, "bench-consume"), "--redis",
                                             self.url, "--queue", q, "--expect", str(n),
                                             "--latency-sleep-us", str(pr["lat_sleep_us"]),
                                             "--latency-samples", str(n)]
                                            + opt("--prefetch", pr["prefetch"])], [])
            return dict(n=c[0]["lat_n"], waited=c[0]["lat_waited"], p50=c[0]["lat_p50_ns"] / 1e3,
                        p99=c[0]["lat_p99_ns"] / 1e3, max=c[0]["lat_max_ns"] / 1e3,
                        prefetch=pr["prefetch"], sleep=pr["lat_sleep_us"],
                        push_us=push_cpu / n * 1e6, pop_us=pop_cpu / n * 1e6)
        finally:
            self.ctl("delete", q)


    # ---- network latency: through the delay proxy ------------------------
    def proxy_start(self, delay_us):
        """Starts $BUILD/delay-proxy to the private server, delaying each
        direction by delay_us; returns (process, its port)."""
        # Its stderr goes to a file: a pipe nobody reads would stop it once full.
        err = tempfile.TemporaryFile(mode="w+")
        p = subprocess.Popen([os.path.join(self.build, "delay-proxy"), "--listen", "127.0.0.1:0",
                              "--to", "127.0.0.1:%d" % self.a.port, "--delay-us", str(delay_us)],
                             stdout=subprocess.PIPE, stderr=err, text=True)
        ready = select.select([p.stdout], [], [], 10)[0]
        words = p.stdout.readline().split() if ready else []
        if len(words) != 2 or words[0] != "listening" or not words[1].isdigit():
            self.proxy_stop(p)
            err.seek(0)
            raise RuntimeError("delay-proxy --delay-us %d did not say 'listening PORT' within "
                               "10 s: %s" % (delay_us, err.read().strip() or words))
        err.close()
        return p, int(words[1])

    @staticmethod
    def proxy_stop(p):
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    @staticmethod
    def ping_ms(port, n=21):
        """Median round trip of a PING to the server on port, in ms."""
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            times = []
            for _ in range(n):
                t0 = time.perf_counter()
                s.sendall(b"PING\r\n")
                got = b""
                while not got.endswith(b"\r\n"):
                    chunk = s.recv(64)
                    if not chunk:
                        raise RuntimeError("the connection closed during PING")
                    got += chunk
                times.append(time.perf_counter() - t0)
        return statistics.median(times) * 1e3

    def delayed(self, size, system, port):
        """One 1x1 run of system ("sluice acks": library defaults, "peer",
        "strong peer") through the proxy on port (None: straight to the
        server)."""
        pr = PARAMS[size]
        if system == "sluice acks":
            url = "redis://127.0.0.1:%d" % port if port else self.url
            return self.sluice(size, "explicit", 1, 1, url=url, defaults=True,
                               count=pr["delay_count"], duration_ms=self.delay_ms)
        return self.peer(size, 1, 1, strong=system == "strong peer", port=port,
                         count=pr["delay_count"], duration_ms=self.delay_ms)

    # ---- compression ----------------------------------------------------
    def compress_support(self):
        """None when `sluice-ctl create` has --compress, else why not."""
        ctl = os.path.join(self.build, "sluice-ctl")
        text = ""
        for args in (["create", "--help"], ["--help"]):
            r = subprocess.run([ctl] + args, capture_output=True, text=True)
            text += r.stdout + r.stderr
        if "--compress" in text:
            return None
        return "`sluice-ctl create` has no --compress in this build (neither `sluice-ctl " \
               "create --help` nor `sluice-ctl --help` mentions it)"

    @staticmethod
    def codec_args(codec):
        return [] if codec == "none" else ["--compress", codec]

    def compressed(self, size, codec, payload):
        """sluice acks 1x1 on a queue created with compression codec."""
        return self.sluice(size, "explicit", 1, 1, payload=payload, create=self.codec_args(codec),
                           count=PARAMS[size]["compress_count"])

    def held(self, size, codec, payload):
        """Bytes Redis holds per batch on a queue with compression codec:
        one producer alone pushes hold_count batches into a queue whose
        budgets hold them all; GET sluice:{Q}:bytes over HLEN
        sluice:{Q}:dlv (the queue's own exact count of its frames' bytes and
        batches)."""
        pr = PARAMS[size]
        n = pr["hold_count"]
        self.nrun += 1
        q = "bench%d" % self.nrun
        self.ctl("create", q, "--max-batches", str(n + 1),
                 "--max-bytes", str((n + 1) * (size + 4096)), *self.codec_args(codec))
        try:
            r = subprocess.run([os.path.join(self.build, "bench-produce"), "--redis", self.url,
                                "--queue", q, "--size", str(size), "--count", str(n),
                                "--payload", payload]
                               + opt("--inflight", None if self.defaults else pr["inflight"]),
                               capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
            if r.returncode != 0:
                raise RuntimeError("bench-produce exited %d: %s" % (r.returncode, r.stderr.strip()))
            held = int(self.cli("GET", "sluice:{%s}:bytes" % q) or 0)
            dlv = "sluice:{%s}:dlv" % q   # its fields but the pin "~" (PROTOCOL.md)
            batches = int(self.cli("HLEN", dlv)) - int(self.cli("HEXISTS", dlv, "~"))
            if batches != n:
                raise RuntimeError("the queue holds %d batches, %d were pushed" % (batches, n))
            return held / n
        finally:
            self.ctl("delete", q)


def loadavg():
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def peer_libs():
    """What the peers run on: redis-py's version, and python3-hiredis's
    when redis-py can use it (else None)."""
    r = subprocess.run([PY, "-c", "import redis, redis.utils\n"
                        "print(redis.__version__)\n"
                        "if redis.utils.HIREDIS_AVAILABLE:\n"
                        "    import hiredis; print(hiredis.__version__)"],
                       capture_output=True, text=True)
    out = r.stdout.split() + [None, None]
    return out[0] or "?", out[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--redis-args", default="")
    ap.add_argument("--out", default=os.path.join(HERE, "results.md"))
    ap.add_argument("--sizes", default=",".join(str(s) for s in SIZES))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="one repetition, a quarter of the data")
    ap.add_argument("--defaults", action="store_true",
                    help="the Throughput rows' sluice runs pass no prefetch / max_inflight: "
                         "the library's defaults (the TLS, cluster and next() runs keep PARAMS)")
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
    ap.add_argument("--delays", default=",".join(str(d) for d in DELAYS_US),
                    help="one-way delays in µs of the network latency part (default %(default)s)")
    ap.add_argument("--no-delay", action="store_true", help="without the network latency part")
    ap.add_argument("--delay-only", action="store_true",
                    help="only the network latency part; its section replaces the one in --out")
    ap.add_argument("--compress-sizes",
                    help="sizes of the compression part (default: those of --sizes among %s)"
                         % ",".join(str(s) for s in COMPRESS_SIZES))
    ap.add_argument("--no-compress", action="store_true", help="without the compression part")
    ap.add_argument("--compress-only", action="store_true",
                    help="only the compression part; its section replaces the one in --out")
    a = ap.parse_args()
    only = [f for f in ("cluster_only", "tls_only", "delay_only", "compress_only") if getattr(a, f)]
    if len(only) > 1:
        ap.error("at most one of --cluster-only, --tls-only, --delay-only, --compress-only")
    if a.no_delay and a.delay_only:
        ap.error("--no-delay and --delay-only contradict each other")
    if a.no_compress and a.compress_only:
        ap.error("--no-compress and --compress-only contradict each other")
    if a.cluster_only and not a.clusters:
        ap.error("--cluster-only needs --clusters")
    if a.tls_only and not a.tls_port:
        ap.error("--tls-only needs --tls-port")

    def size_list(text, what):
        try:
            out = [int(x) for x in text.split(",")]
        except ValueError:
            ap.error("%s %r: a comma-separated list of sizes in bytes" % (what, text))
        for x in out:
            if x not in PARAMS:
                ap.error("%s: size %d: the sizes are %s"
                         % (what, x, ",".join(str(y) for y in SIZES)))
        return out
    sizes = size_list(a.sizes, "--sizes")
    try:
        delays = [int(x) for x in a.delays.split(",")]
    except ValueError:
        delays = [-1]
    if any(d < 0 or d > 1000000 for d in delays) or len(set(delays)) != len(delays):
        ap.error("--delays %r: distinct one-way delays in µs, each 0..1000000 (0: through the "
                 "proxy without delay; loopback is always measured)" % a.delays)
    main_part = not only
    msizes = sizes if main_part else []
    csizes = (size_list(a.cluster_sizes or a.sizes, "--cluster-sizes")
              if a.clusters and (main_part or a.cluster_only) else [])
    tsizes = sizes if a.tls_port and (main_part or a.tls_only) else []
    dsizes = sizes if (main_part or a.delay_only) and not a.no_delay else []
    ksizes = []
    if (main_part or a.compress_only) and not a.no_compress:
        ksizes = (size_list(a.compress_sizes, "--compress-sizes") if a.compress_sizes
                  else [s for s in sizes if s in COMPRESS_SIZES])
    if a.quick:
        a.reps = 1
        for p in PARAMS.values():
            for k in COUNT_KEYS:
                if k != "hold_count":
                    p[k] = max(16, p[k] // 4)
    b = Bench(a)
    started = time.time()
    load0 = loadavg()

    rows = {}       # (size, name, setting...) -> list of runs
    lat = {}
    held = {}       # (size, codec) -> bytes Redis holds per batch
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

    # The network latency part: one proxy per delay for the whole run.
    proxies, rtt, delay_skip = {}, {}, None
    if dsizes:
        if not os.access(os.path.join(b.build, "delay-proxy"), os.X_OK):
            delay_skip = "%s/delay-proxy is not built (make %s/delay-proxy)" % (a.build, a.build)
        else:
            try:
                rtt[LOOPBACK] = Bench.ping_ms(a.port)
                for d in delays:
                    proxies[d] = b.proxy_start(d)
                    rtt[d] = Bench.ping_ms(proxies[d][1])
            except (RuntimeError, OSError) as e:
                delay_skip = "the delay proxy failed: %s" % e
        if delay_skip:
            print("   network latency part skipped: %s" % delay_skip, file=sys.stderr, flush=True)
    compress_skip = b.compress_support() if ksizes else None
    if compress_skip:
        print("   compression part skipped: %s" % compress_skip, file=sys.stderr, flush=True)
    payload = fmnist_payload()

    try:
        for size in sorted(set(msizes) | set(csizes) | set(tsizes) | set(dsizes) | set(ksizes)):
            print("== %s" % human(size), file=sys.stderr, flush=True)
            for rep in range(a.reps):
                if size in csizes:
                    for m in sorted(b.clusters):
                        add((size, "cluster", m), attempt("cluster %d masters" % m, b.cluster,
                                                          size, m))
                    if a.cluster_only:
                        # The single server's plain queue that `x single`
                        # compares with, measured in this run too.
                        topo = "%dx%d" % CLUSTER_TOPO
                        add((size, "sluice acks", topo), attempt("sluice acks " + topo, b.sluice,
                                                                 size, "explicit", *CLUSTER_TOPO))
                if size in tsizes:
                    # Plain and TLS in turns, the order swapped every repetition.
                    order = [("plain", b.url), ("TLS", b.tls_url)][::1 if rep % 2 == 0 else -1]
                    for label, url in order:
                        add((size, "tls", label), attempt("sluice acks 1x1 over " + label,
                                                          b.sluice, size, "explicit", 1, 1, url))
                if size in msizes:
                    measure_main(b, size, sluice_cfg, attempt, add)
                if size in dsizes and proxies:
                    # Loopback and each delay in turns, starting elsewhere
                    # every repetition.
                    order = [LOOPBACK] + delays
                    k = rep % len(order)
                    for d in order[k:] + order[:k]:
                        port = proxies[d][1] if d != LOOPBACK else None
                        for system in ("sluice acks", "peer", "strong peer"):
                            add((size, "delay", system, d),
                                attempt("%s 1x1 at %d µs" % (system, d), b.delayed, size, system,
                                        port))
                if size in ksizes and not compress_skip:
                    k = rep % len(CODECS)
                    for codec in CODECS[k:] + CODECS[:k]:
                        add((size, "compress", codec), attempt("sluice acks 1x1, compression " +
                                                               codec, b.compressed, size, codec,
                                                               payload))
                        if rep == 0:
                            held[(size, codec)] = attempt("bytes held, compression " + codec,
                                                          b.held, size, codec, payload)
                print("   rep %d done (%.0f s)" % (rep + 1, time.time() - started),
                      file=sys.stderr, flush=True)
            if size in msizes:
                r = attempt("next() latency", b.latency, size)
                if r is not None:
                    lat[size] = r
    finally:
        for p, _ in proxies.values():
            Bench.proxy_stop(p)

    load = (load0, loadavg())
    own = failures if only else []
    sections = {
        report.CLUSTER_HEADING: report.render_cluster(a, csizes, rows, sorted(b.clusters),
                                                      own if a.cluster_only else []),
        report.TLS_HEADING: report.render_tls(a, tsizes, rows, own if a.tls_only else [], load),
        report.DELAY_HEADING: report.render_delay(a, dsizes, rows, delays, b.delay_ms, rtt,
                                                  delay_skip, own if a.delay_only else [], load),
        report.COMPRESS_HEADING: report.render_compress(a, ksizes, rows, held, payload,
                                                        compress_skip,
                                                        own if a.compress_only else []),
    }
    if only:
        heading = {"cluster_only": report.CLUSTER_HEADING, "tls_only": report.TLS_HEADING,
                   "delay_only": report.DELAY_HEADING,
                   "compress_only": report.COMPRESS_HEADING}[only[0]]
        print(sections[heading])
        report.splice_section(a.out, sections[heading], heading)
        print("section replaced in %s" % os.path.relpath(a.out, ROOT), file=sys.stderr)
        return
    extra = dict(delays=delays, held=held, compress_skip=compress_skip, delay_skip=delay_skip,
                 delay_run=bool(dsizes), libs=peer_libs())
    text = report.render(a, msizes, rows, lat, time.time() - started, load, failures,
                         "\n".join(x for x in sections.values() if x), extra)
    print(text)
    with open(a.out, "w") as f:
        f.write(text)
    print("written to %s" % os.path.relpath(a.out, ROOT), file=sys.stderr)


def measure_main(b, size, sluice_cfg, attempt, add):
    """One repetition of the Throughput rows of a size: the limit's six
    settings, sluice's four rows, the plain and the strong peer."""
    if attempt("limit pre-fill", b.limit_prefill, size):
        for c, pl in LIMIT_SETTINGS:
            setting = "-c %d -P %d" % (c, pl)
            add((size, "limit", setting), attempt("limit " + setting, b.limit, size, c, pl))
        b.limit_done()
    for label, ack, np_, nc in sluice_cfg:
        topo = "%dx%d" % (np_, nc)
        add((size, "sluice " + label, topo),
            attempt("sluice %s %s" % (label, topo), b.sluice, size, ack, np_, nc))
    for strong in (False, True):
        name = "strong peer" if strong else "peer"
        for np_, nc in ((1, 1), (2, 2)):
            topo = "%dx%d" % (np_, nc)
            add((size, name, topo), attempt("%s %s" % (name, topo), b.peer, size, np_, nc, strong))


if __name__ == "__main__":
    main()
