"""What `make bench` runs, shared by the driver (bench.py), its report
(report.py) and bench/compare.py: payload sizes, per-size settings and
batch counts, budgets, and small helpers. bench/README.md says what each
number means.
"""
import os

KIB, MIB = 1024, 1024 * 1024
SIZES = [KIB, 64 * KIB, MIB, 4 * MIB]

# Per payload size, batches per run of:
#   count             sluice (the Throughput rows, TLS, cluster, compression)
#   peer_count        the plain Python peer
#   strong_count      the strong Python peer
#   limit_count       redis-benchmark -P 16 (-n: split over the -c clients)
#   limit_count_p1    redis-benchmark -P 1
#   lat_count         the next() latency run (with lat_sleep_us before each call)
#   delay_count       at most, through the delay proxy (sluice and both
#                     peers; each producer stops after DELAY_RUN_MS anyway:
#                     how fast a system is over a slow link is not known in
#                     advance, and a count that takes 1 s on loopback can
#                     take minutes at 1 ms a way)
#   compress_count    sluice in the compression section
#   hold_count        the compression section's held-bytes run (producer alone)
# and the sluice settings of the Throughput rows: the consumer's prefetch and
# the producer's max_inflight; None = pass nothing, the library's default
# (windows of bytes that grow with the round-trip time), which is what
# every row runs with (bench.py --defaults passes nothing whatever they
# say here; a number tries a fixed setting).
PARAMS = {
    KIB: dict(count=100000, peer_count=12000, strong_count=40000, limit_count=200000,
              limit_count_p1=30000, lat_count=3000, lat_sleep_us=100, delay_count=50000,
              compress_count=30000, hold_count=1000, prefetch=None, inflight=None),
    64 * KIB: dict(count=8192, peer_count=4096, strong_count=8192, limit_count=8192,
                   limit_count_p1=8192, lat_count=1000, lat_sleep_us=300, delay_count=10000,
                   compress_count=4096, hold_count=256, prefetch=None, inflight=None),
    MIB: dict(count=512, peer_count=256, strong_count=512, limit_count=512, limit_count_p1=512,
              lat_count=200, lat_sleep_us=3000, delay_count=1500,
              compress_count=256, hold_count=32, prefetch=None, inflight=None),
    4 * MIB: dict(count=128, peer_count=64, strong_count=128, limit_count=128,
                  limit_count_p1=128, lat_count=60, lat_sleep_us=12000, delay_count=400,
                  compress_count=64, hold_count=8, prefetch=None, inflight=None),
}
COUNT_KEYS = ("count", "peer_count", "strong_count", "limit_count", "limit_count_p1",
              "lat_count", "delay_count", "compress_count", "hold_count")
# What a consumer holds ahead of next() at most (consumer.h): prefetch
# batches (0: 1024) and about prefetch_bytes of frames (0: 64 MiB; one
# batch far larger than those before may pass it once). Only the consumer
# RSS target uses them.
LIBRARY_PREFETCH_DEFAULT = 1024
LIBRARY_PREFETCH_BYTES = 64 * MIB

BUDGET_BYTES = 64 * MIB      # queue byte budget (sluice) = list budget (peers)
BUDGET_BATCHES_MAX = 1024
# redis-benchmark (-c, -P): the limit is the best of them.
LIMIT_SETTINGS = [(c, p) for c in (1, 4, 16) for p in (1, 16)]
# Commands redis-benchmark may send past -n: it rounds -n up to a multiple
# of -P (whatever -c), so the pre-fill adds the largest -P.
LIMIT_OVERSHOOT = max(p for _, p in LIMIT_SETTINGS)
# The strong peer runs with glibc's malloc thresholds raised, so that a
# reply of 128 KiB or more is not a fresh mmap (and ~256 page faults a MiB).
STRONG_PEER_ENV = {"MALLOC_MMAP_THRESHOLD_": str(256 * MIB),
                   "MALLOC_TRIM_THRESHOLD_": str(256 * MIB)}
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
# One-way delays of the network latency section, µs; 0 = through the proxy
# without delay (what the proxy's own copying costs on the shared cores).
DELAYS_US = [0, 250, 1000]
LOOPBACK = -1                # its key for the runs straight to the server
DELAY_RUN_MS = 500           # how long a producer pushes there (--quick: a quarter)
COMPRESS_SIZES = [KIB, 64 * KIB, MIB]
CODECS = ["none", "lz4", "zstd"]
FMNIST_FILE = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"


def human(n):
    return "%d KiB" % (n // KIB) if n < MIB else "%d MiB" % (n // MIB)


def budget_batches(size):
    return max(4, min(BUDGET_BATCHES_MAX, BUDGET_BYTES // size))


def opt(flag, value):
    """[flag, value] for a command line, or nothing when value is None."""
    return [] if value is None else [flag, str(value)]


def median_run(runs):
    """The run whose MB/s is the median of the repetitions (its other
    figures come with it)."""
    runs = sorted(runs, key=lambda r: r["mbs"])
    return runs[(len(runs) - 1) // 2]


def fmt(x, nd=0):
    return "-" if x is None else ("%.*f" % (nd, x))


def fmnist_payload():
    """The compression section's payload: fmnist when the dataset is
    installed, else text (bench-produce would fall back to it anyway)."""
    return "fmnist" if os.path.exists(FMNIST_FILE) else "text"
