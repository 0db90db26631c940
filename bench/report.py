"""The markdown report of `make bench` (bench.py measures, this writes):
the main report (settings, Throughput, next() latency, Targets) and the
sections of the cluster, TLS, network latency and compression parts, each
also written alone into results.md by the *-only options
(splice_section). bench/README.md says what each number means.
"""
import datetime
import os
import platform
import subprocess

from params import (KIB, MIB, PARAMS, LOOPBACK, BUDGET_BYTES, BUDGET_BATCHES_MAX,
                    LIBRARY_PREFETCH_DEFAULT, LIBRARY_PREFETCH_BYTES, STRONG_PEER_ENV,
                    PARTITIONS_PER_MASTER, CLUSTER_TOPO, CHUNK_MIN, CHUNK_ROUNDS, CODECS,
                    FMNIST_FILE, human, budget_batches, median_run, fmt)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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


def render_cluster(a, csizes, rows, masters, failures):
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
         if ncpu < max(masters) + sum(CLUSTER_TOPO) else ""))
    w("- clusters: %s, private, no replicas, every node `redis-server --cluster-enabled yes %s`; "
      "the idle clusters stay up during every run"
      % (", ".join("%d master%s" % (m, "s" if m > 1 else "") for m in masters),
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
    w("| size | masters | partitions (per master) | chunk | batches/s | MB/s | x 1 master | "
      "x single | prod CPU s/GB | cons CPU s/GB | redis CPU s/GB (all nodes) | "
      "busiest master CPU s/GB | busiest master core use | Redis capacity x 1 master | "
      "cons RSS MiB |")
    w("|---|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for s in csizes:
        one = med.get((s, "cluster", 1))
        single = med.get((s, "sluice acks", "%dx%d" % CLUSTER_TOPO))
        for m in masters:
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


def section_start(heading, skip):
    """The lines of a section that starts with heading, and their append;
    when skip (why the section was not run) is set, they say so."""
    out = []
    out.append(heading + "\n")
    if skip:
        out.append("Skipped: %s.\n" % skip)
    return out, out.append


def render_delay(a, sizes, rows, delays, delay_ms, rtt, skip, failures, load):
    """The network latency section: sluice acks 1x1 with the library's
    defaults and the two peers 1x1, straight to the server and through
    $BUILD/delay-proxy at each one-way delay, per size; each system's MB/s
    and its ratio to its own loopback figure. Empty when not run."""
    if not sizes:
        return ""
    out, w = section_start(DELAY_HEADING, skip)
    if skip:
        return "\n".join(out)
    med = {k: median_run(v) for k, v in rows.items() if v}
    w("Every connection of the run (sluice's producer and consumer, the peers') goes through "
      "`%s/delay-proxy --delay-us D`, which holds each direction's bytes D µs and does not limit "
      "bandwidth: a round trip gains 2D. The queue is created, and Redis CPU read, over the "
      "server's own port. sluice = acks on, 1 producer x 1 consumer, **library defaults** (no "
      "prefetch / max_inflight passed); peer and strong peer 1x1 as in Throughput. Each "
      "producer pushes for %d ms (or until it pushed %s batches), then the consumer takes the "
      "rest; MB/s = payload over first push to last batch received; `batches` = how many the "
      "reported run moved. Loopback and every delay in turns in each repetition (%d), the order "
      "rotated; each figure the run with the median MB/s; `x loopback` = that over the same "
      "system's loopback median (straight to the server); 0 µs one-way is the proxy without "
      "delay, what its own copying costs on the shared cores. Measured PING round trip (median of 21): %s. Load average "
      "(1 min) at the start and the end of the run: %s, %s.\n"
      % (a.build, delay_ms, " / ".join("%d at %s" % (PARAMS[s]["delay_count"], human(s))
                                       for s in sizes), a.reps,
         ", ".join("%s %.2f ms" % ("loopback" if d == LOOPBACK else "%d µs" % d, rtt[d])
                   for d in [LOOPBACK] + delays if d in rtt), load[0], load[1]))
    w("| size | system | loopback MB/s | batches | "
      + " | ".join("%d µs one-way (RTT +%s ms) MB/s | batches | x loopback" % (d, fmt_ms(2 * d))
                   for d in delays) + " |")
    w("|---|---|--:|--:|" + "--:|--:|--:|" * len(delays))
    for s in sizes:
        for system in ("sluice acks", "peer", "strong peer"):
            base = med.get((s, "delay", system, LOOPBACK))
            cells = []
            for d in delays:
                v = med.get((s, "delay", system, d))
                cells += [fmt(v and v["mbs"]), fmt(v and v["batches"]),
                          fmt(v and base and v["mbs"] / base["mbs"], 2)]
            w("| %s | %s | %s | %s | %s |" % (human(s), system, fmt(base and base["mbs"]),
                                               fmt(base and base["batches"]), " | ".join(cells)))
    w("")
    failed_list(w, failures)
    return "\n".join(out)


def fmt_ms(us):
    return ("%.2f" % (us / 1000)).rstrip("0").rstrip(".")


def render_compress(a, sizes, rows, held, payload, skip, failures):
    """The compression section: sluice acks 1x1 on queues created without
    compression, with lz4 and with zstd, a compressible payload; MB/s of
    payload and bytes Redis holds per batch, each against no compression.
    Empty when not run."""
    if not sizes:
        return ""
    out, w = section_start(COMPRESS_HEADING, skip)
    if skip:
        return "\n".join(out)
    med = {k: median_run(v) for k, v in rows.items() if v}
    what = ("Fashion-MNIST's training pixels (`%s`, one batch after the other through them)"
            % FMNIST_FILE if payload == "fmnist" else
            "English-like text (`bench-produce --payload text`: the Fashion-MNIST file `%s` is "
            "not installed)" % FMNIST_FILE)
    w("Payload: %s. sluice acks on, 1 producer x 1 consumer, %s, %s batches a run, on a "
      "queue created with no compression (`none`: no --compress), `--compress lz4` and "
      "`--compress zstd` (its default level): the producer compresses, the consumer "
      "decompresses; the three in turns in each repetition (%d), the order rotated; each figure "
      "the run with the median MB/s of payload (uncompressed bytes). `held/batch` = bytes the "
      "queue holds per batch: one producer alone pushes `held batches` into a fresh queue whose "
      "budgets hold them all, then `GET sluice:{Q}:bytes` / the fields of `sluice:{Q}:dlv` but its pin `~` (the queue's "
      "own count of its frames' bytes and of its batches).\n"
      % (what, "library defaults" if a.defaults else "the per-size settings of Throughput",
         " / ".join("%d at %s" % (PARAMS[s]["compress_count"], human(s)) for s in sizes),
         a.reps))
    w("| size | compression | MB/s | x none | held batches | held/batch bytes | x none (held) | "
      "prod CPU s/GB | cons CPU s/GB | redis CPU s/GB |")
    w("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|")
    for s in sizes:
        base, hbase = med.get((s, "compress", "none")), held.get((s, "none"))
        for codec in CODECS:
            v, h = med.get((s, "compress", codec)), held.get((s, codec))
            w("| %s | %s | %s | %s | %d | %s | %s | %s | %s | %s |"
              % (human(s), codec, fmt(v and v["mbs"]),
                 fmt(v and base and v["mbs"] / base["mbs"], 2), PARAMS[s]["hold_count"],
                 fmt(h), fmt(h and hbase and h / hbase, 2),
                 fmt(v and v["pcpu"], 2), fmt(v and v["ccpu"], 2), fmt(v and v["rcpu"], 2)))
    w("")
    failed_list(w, failures)
    return "\n".join(out)


def header(a, sizes, med, elapsed, load, libs):
    """The report's opening: the run, the machine, the settings per size."""
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
    # What the strong peer's runs said they used, else what redis-py finds.
    used = [v["hiredis"] for k, v in med.items() if k[1] == "strong peer"]
    if min(used) if used else libs[1]:
        parser = "hiredis (python3-hiredis %s)" % libs[1]
    else:
        parser = "**pure-Python** (python3-hiredis is not installed: scripts/install-deps.sh " \
                 "python3-hiredis)"
    w("# sluice benchmark (`make bench`)\n")
    w("- date: %s; run took %.0f s" % (datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
                                       elapsed))
    w("- load average (1 min) at the start and the end: %s, %s%s"
      % (load[0], load[1], "  **(other work shared the cores: absolute figures are low; the "
         "ratios, measured side by side, hold better)**"
         if max(float(load[0]), float(load[1])) > 1.0 + 0.25 * os.cpu_count() else ""))
    w("- machine: %d cores (nproc), %s, Linux %s" % (os.cpu_count(), cpu, platform.release()))
    w("- tree: %s%s" % (head, " (with uncommitted changes)" if dirty else ""))
    w("- Redis %s, private server: `redis-server %s` on loopback TCP"
      % (redis_ver, a.redis_args.strip()))
    w("- payload: one record per batch of the stated size, bytes that do not compress; a sluice "
      "frame adds its header (column `frame` below), the peers' msgpack map adds ~20 bytes")
    w("- repetitions: %d, interleaved; each figure is the run with the median MB/s" % a.reps)
    w("- budgets: %d MiB and min(%d, %d MiB / size) batches for the sluice queue; the peers' "
      "list is held to the same batch count"
      % (BUDGET_BYTES // MIB, BUDGET_BATCHES_MAX, BUDGET_BYTES // MIB))
    w("- sluice settings of the Throughput rows: %s"
      % ("**library defaults** (--defaults: no prefetch / max_inflight passed)" if a.defaults
         else "per size, below (the network latency rows always run on library defaults)"))
    w("- peers (Python, redis-py %s, msgpack): **peer** = the pure-Python reply parser, one "
      "round trip per batch (RPUSH; BLPOP), glibc's malloc as is; **strong peer** = reply "
      "parser: %s, %d RPUSHes per round trip, `BLMPOP ... COUNT 16`, %s"
      % (libs[0], parser, 16, " and ".join("%s=%d MiB" % (k, int(v) // MIB)
                                           for k, v in sorted(STRONG_PEER_ENV.items()))))
    w("- MB = 10^6 bytes of payload; CPU s/GB = CPU seconds (user+sys, all threads) per 10^9 "
      "payload bytes, summed over the processes of a role (the peers' from their first push / "
      "their `ready`, so interpreter start-up is not billed); redis CPU from INFO cpu; RSS = "
      "peak (VmHWM), max over the processes of a role")
    w("")
    w("| size | frame bytes | per-size settings | batches per run: sluice, peer, strong peer, "
      "redis-benchmark -P 16, -P 1 (-n, split over the -c clients) |")
    w("|---|--:|---|---|")
    for s in sizes:
        p = PARAMS[s]
        frame = max((v["frame"] for k, v in med.items()
                     if k[0] == s and k[1].startswith("sluice")), default=0)
        w("| %s | %s | %s, budget %d batches | %d, %d, %d, %d, %d |"
          % (human(s), "%.0f" % frame if frame else "-", settings(a, p), budget_batches(s),
             p["count"], p["peer_count"], p["strong_count"], p["limit_count"],
             p["limit_count_p1"]))
    w("")
    return out


def settings(a, p):
    if a.defaults:
        return "library defaults"
    return "prefetch %s, max_inflight %s" % tuple("library default" if p[k] is None else p[k]
                                                 for k in ("prefetch", "inflight"))


def best_of(med, s, name):
    """The median run of name at size s with the best MB/s over its
    settings, or None."""
    c = [v for k, v in med.items() if k[0] == s and k[1] == name]
    return max(c, key=lambda v: v["mbs"]) if c else None


def ratio(x, y):
    return x["mbs"] / y["mbs"] if x and y else None


MAIN_ROWS = ("limit", "sluice acks", "sluice at-most-once", "peer", "strong peer")


def render(a, sizes, rows, lat, elapsed, load, failures, sections, extra):
    med = {k: median_run(v) for k, v in rows.items() if v}
    out = header(a, sizes, med, elapsed, load, extra["libs"])
    w = out.append
    w("## Throughput\n")
    w("`limit` = redis-benchmark LPUSH and RPOP of the same value size run concurrently on "
      "`mylist` (pre-filled so no RPOP finds it empty), each with -c connections and -P "
      "commands per round trip; pairs/s = min(push rate, pop rate); the six settings are "
      "listed and the best is marked. `x limit` compares with the best limit setting; `x peer` "
      "with the plain peer of the same topology (producers x consumers), `x strong` with the "
      "strong peer of the same topology.\n")
    w("| size | system | setting | batches/s | MB/s | x limit | x peer | x strong | "
      "prod CPU s/GB | cons CPU s/GB | redis CPU s/GB | prod RSS MiB | cons RSS MiB |")
    w("|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for s in sizes:
        lim = best_of(med, s, "limit")
        for name in MAIN_ROWS:
            for k, v in med.items():
                if k[0] != s or k[1] != name:
                    continue
                if name == "limit":
                    w("| %s | limit | %s | %s | %s | %s | | | | | %s | | |"
                      % (human(s), k[2] + (" **(best)**" if v is lim else ""), fmt(v["bps"]),
                         fmt(v["mbs"]), fmt(ratio(v, lim), 2), fmt(v["rcpu"], 2)))
                    continue
                peer = med.get((s, "peer", k[2])) if name != "peer" else None
                strong = med.get((s, "strong peer", k[2])) if "peer" not in name else None
                w("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |"
                  % (human(s), name, k[2], fmt(v["bps"]), fmt(v["mbs"]), fmt(ratio(v, lim), 2),
                     fmt(ratio(v, peer), 1), fmt(ratio(v, strong), 2), fmt(v["pcpu"], 2),
                     fmt(v["ccpu"], 2), fmt(v["rcpu"], 2), fmt(v["prss"], 1),
                     fmt(v["crss"], 1)))
    w("")
    if sections:
        w(sections)
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
        l_, lim = lat[s], best_of(med, s, "limit")
        w("| %s | %s | %d | %d | %d | %.1f | %.1f | %.1f | %.1f | %.1f | %s |"
          % (human(s), "default" if l_["prefetch"] is None else l_["prefetch"], l_["sleep"],
             l_["n"], l_["waited"], l_["p50"], l_["p99"], l_["max"], l_["push_us"],
             l_["pop_us"], fmt(lim and lim["rcpu"] * s / 1e3, 1)))
    w("")
    out += targets(sizes, med, lat, extra)
    if failures:
        w("## Failed measurements\n")
        for f_ in failures:
            w("- " + f_)
        w("")
    return "\n".join(out)


def targets(sizes, med, lat, extra):
    """The Targets section's lines."""
    out = []
    w = out.append
    w("## Targets\n")
    w("sluice = acks on (the default), the better of 1x1 and 2x2; peer and strong peer "
      "likewise; limit = the best redis-benchmark setting. At 1 ms: the network latency "
      "section's 1x1 runs (sluice with library defaults) at 1000 µs one-way.\n")
    w("| target | measured | result |")
    w("|---|---|---|")

    def line(what, measured, ok, missing="no data"):
        w("| %s | %s | %s |" % (what, measured or missing, "PASS" if measured and ok else "MISS"))
    for s in sizes:
        sl, lim = best_of(med, s, "sluice acks"), best_of(med, s, "limit")
        need = 0.5 if s < 64 * KIB else 0.8
        r = ratio(sl, lim)
        line("%s: sluice >= %d%% of the limit" % (human(s), need * 100),
             r and "%.0f%% (%.0f of %.0f MB/s)" % (r * 100, sl["mbs"], lim["mbs"]), r and r >= need)
    for s in sizes:
        if s not in (KIB, MIB):
            continue
        sl, pe = best_of(med, s, "sluice acks"), best_of(med, s, "peer")
        r = ratio(sl, pe)
        line("%s: sluice >= 3x the peer" % human(s),
             r and "%.1fx (%.0f vs %.0f MB/s)" % (r, sl["mbs"], pe["mbs"]), r and r >= 3)
    for s in sizes:
        sl, st = best_of(med, s, "sluice acks"), best_of(med, s, "strong peer")
        r = ratio(sl, st)
        line("%s: sluice ahead of the strong peer (loopback)" % human(s),
             r and "%.2fx (%.0f vs %.0f MB/s)" % (r, sl["mbs"], st["mbs"]), r and r > 1)
    # The 1 ms lines: none when the network latency part was not asked
    # for (--no-delay), MISS with the reason when it was skipped.
    why = extra["delay_skip"] and "skipped: " + extra["delay_skip"]
    if 1000 not in extra["delays"]:
        why = "not measured: 1000 is not among --delays"
    for s in sizes if extra["delay_run"] else []:
        sl, st = med.get((s, "delay", "sluice acks", 1000)), med.get((s, "delay", "strong peer",
                                                                     1000))
        r = ratio(sl, st)
        line("%s: sluice ahead of the strong peer at 1 ms" % human(s),
             r and "%.2fx (%.0f vs %.0f MB/s)" % (r, sl["mbs"], st["mbs"]), r and r > 1,
             why or "no data")
    for s in sizes if extra["delay_run"] else []:
        if s < 64 * KIB:
            continue
        d = med.get((s, "delay", "sluice acks", 1000))
        lo = med.get((s, "delay", "sluice acks", LOOPBACK))
        p0 = med.get((s, "delay", "sluice acks", 0))
        r, r0 = ratio(d, lo), ratio(d, p0)
        line("%s: at 1 ms sluice (library defaults) keeps >= 80%% of its loopback MB/s"
             % human(s), r and "%.0f%% (%.0f of %.0f MB/s)%s" % (
                 r * 100, d["mbs"], lo["mbs"],
                 "; %.0f%% of its MB/s through the proxy at 0 µs" % (r0 * 100) if r0 else ""),
             r and r >= 0.8, why or "no data")
    if KIB in sizes:
        sl, lim = med.get((KIB, "sluice acks", "1x1")), best_of(med, KIB, "limit")
        us = sl and sl["rcpu"] * KIB / 1e3
        lus = lim and lim["rcpu"] * KIB / 1e3
        line("1 KiB: Redis CPU per batch (sluice acks 1x1) <= 2x the LPUSH+RPOP pair's (best "
             "limit setting)", us and lus and "%.1f vs %.1f µs (%.1fx)" % (us, lus, us / lus),
             us and lus and us <= 2 * lus)
    for s in sizes:
        l_ = lat.get(s)
        line("%s: next() median < 10 µs when prefetched" % human(s),
             l_ and "%.1f µs (p99 %.1f)" % (l_["p50"], l_["p99"]), l_ and l_["n"] and
             l_["p50"] < 10)
    for s in sizes:
        worst = max((v for k, v in med.items() if k[0] == s and k[1].startswith("sluice")
                     and len(k) == 3), key=lambda v: v["crss"], default=None)
        pf = worst and (LIBRARY_PREFETCH_DEFAULT if worst["prefetch"] is None
                        else worst["prefetch"])
        ahead = worst and min(pf * worst["frame"], LIBRARY_PREFETCH_BYTES + worst["frame"])
        lim = worst and ahead / MIB + 16
        line("%s: consumer RSS <= what it may hold ahead (min(prefetch x frame, %d MiB + "
             "frame)) + 16 MiB" % (human(s), LIBRARY_PREFETCH_BYTES // MIB),
             worst and "%.1f MiB (limit %.1f%s)" % (worst["crss"], lim, ", prefetch: library "
                                                    "default %d" % pf
                                                    if worst["prefetch"] is None else ""),
             worst and worst["crss"] <= lim)
    held = extra["held"]
    for s in sorted({k[0] for k in held}):
        base, hbase = med.get((s, "compress", "none")), held.get((s, "none"))
        parts = []
        for codec in CODECS[1:]:
            v, h = med.get((s, "compress", codec)), held.get((s, codec))
            if v and base and h and hbase:
                parts.append("%s: %.2fx MB/s, %.2fx bytes held" % (codec, v["mbs"] / base["mbs"],
                                                                 h / hbase))
        line("%s: compression's gain reported" % human(s), "; ".join(parts),
             len(parts) == len(CODECS) - 1)
    if extra["compress_skip"]:
        line("compression's gain reported", None, False, "skipped: " + extra["compress_skip"])
    w("")
    return out


CLUSTER_HEADING = "## Scaling over Redis Cluster masters"
TLS_HEADING = "## The cost of TLS (rediss://)"
DELAY_HEADING = "## Real network latency (delay proxy)"
COMPRESS_HEADING = "## Compression"
