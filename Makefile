# sluice — plain Makefile. `make`, `make test`, `make demo`, `make asan`,
# `make install PREFIX=/usr/local DESTDIR=` (and PYTHONDIR=, below), `make clean`.
# User CFLAGS are appended to ours, never replace them.

PREFIX  ?= /usr/local
DESTDIR ?=
BUILD   ?= build
SAN     ?=
CC      ?= cc

PKGS      := hiredis libevent msgpack openssl liblz4 libzstd
BASE_CFLAGS := -std=c11 -Wall -Wextra -Werror -O2 -g -fPIC -D_GNU_SOURCE -fvisibility=hidden
ALL_CFLAGS  = $(BASE_CFLAGS) $(SAN) $(shell pkg-config --cflags $(PKGS) 2>/dev/null) $(CFLAGS)
LIBS        = $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lpthread -lz -ldl
ALL_LDFLAGS = $(SAN) $(LDFLAGS)

# ---- the parts and what each may see --------------------------------------
# docs/ARCHITECTURE.md "Where things live" maps every folder. A part is
# compiled with the include folders of itself and of the parts below it,
# never of a part above: the build keeps the layers.
#
#   common/include/sluice  the public API (all that is installed)
#   common/src             libsluice's core: errors, addresses, connections
#                          (TLS too), the key schema and scripts, the wire
#                          format, cluster
#   consumer/src           libsluice's consumer half       (sees core)
#   producer/src           libsluice's producer half       (sees core)
#   producer/job           job logic: manifests, readers, transforms, the
#                          batcher; in sluice-producer and sluice-ctl
#   common/cli             what the programs share: flags, metrics endpoint
#   producer/daemon        sluice-producer
#   consumer/cli           sluice-consume
#   ctl                    sluice-ctl
PUB      := -Icommon/include
CORE     := $(PUB) -Icommon/src
INC_common/src     := $(CORE)
INC_consumer/src   := $(CORE) -Iconsumer/src
INC_producer/src   := $(CORE) -Iproducer/src
INC_producer/job   := $(CORE) -Iproducer/job
INC_common/cli     := $(CORE) -Icommon/cli
INC_producer/daemon := $(CORE) -Iproducer/src -Iproducer/job -Icommon/cli
INC_consumer/cli   := $(CORE) -Icommon/cli
INC_ctl            := $(CORE) -Iproducer/job -Icommon/cli
INC_examples       := $(PUB)
# Tests and their tools see everything.
INC_tests          := $(CORE) -Iconsumer/src -Iproducer/src -Iproducer/job -Icommon/cli
# The include flags of a source file: those of the first part its path starts with.
PART_OF = $(firstword $(foreach p,producer/daemon producer/job producer/src consumer/src consumer/cli \
                                  common/src common/cli ctl examples tests,$(if $(filter $(p)/%,$(1)),$(p))))
INC_OF  = $(INC_$(call PART_OF,$(1)))

LIB_SRC := $(wildcard common/src/*.c consumer/src/*.c producer/src/*.c)
JOB_SRC := $(wildcard producer/job/*.c producer/job/readers/*.c)
CLI_SRC := $(wildcard common/cli/*.c)
LUA_SCRIPTS := create delete push take claim ack requeue reap beat dead deadadmin restore \
               submit task_claim task_renew task_done task_fail task_check checkpoint
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o) $(BUILD)/common/lua_scripts.o
JOB_OBJ := $(JOB_SRC:%.c=$(BUILD)/%.o)
CLI_OBJ := $(CLI_SRC:%.c=$(BUILD)/%.o)
HEADERS := $(wildcard common/include/sluice/*.h)
INTERNAL_HEADERS := $(wildcard common/src/*.h consumer/src/*.h producer/src/*.h producer/job/*.h \
                               common/cli/*.h ctl/*.h producer/daemon/*.h)

PROGRAMS := $(BUILD)/sluice-producer $(BUILD)/sluice-consume $(BUILD)/sluice-ctl \
            $(BUILD)/sluice-trainer
# What the docs' examples use besides the programs (README.md, docs/JOBS.md):
# a TFRecord generator and the example --transform plugin. Built by `make`,
# not installed.
DOC_TOOLS := $(BUILD)/gen-tfrecord $(BUILD)/examples/libupper.so
UNIT_SRC := $(wildcard tests/unit/test_*.c)
UNIT_BIN := $(BUILD)/unit-tests

.PHONY: all deps test unit integration asan valgrind demo bench install uninstall clean

all: $(BUILD)/libsluice.a $(BUILD)/libsluice.so $(BUILD)/sluice.pc $(PROGRAMS) $(DOC_TOOLS)

# Installs the Debian packages that are missing (does nothing when all are
# there). `make` only builds; `make deps` (and test, demo, bench, asan,
# valgrind, fuzz, which need a redis-server) install.
deps:
	@scripts/install-deps.sh

# A plain build on a machine without the packages says what to do first.
ifneq ($(filter-out deps clean uninstall test test-faults soak asan valgrind demo bench fuzz \
                    compose-check,$(or $(MAKECMDGOALS),all)),)
ifneq ($(shell pkg-config --exists $(PKGS) 2>/dev/null && echo ok),ok)
$(warning sluice: the packages of $(PKGS) are not all installed: run `make deps` first)
endif
endif

$(BUILD)/%.o: %.c $(HEADERS) $(INTERNAL_HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(call INC_OF,$<) -c $< -o $@

# The Lua scripts are written as common/lua/*.lua and embedded as C strings.
$(BUILD)/common/lua_scripts.c: $(wildcard common/lua/*.lua) scripts/embed-lua.sh scripts/lua-expand.awk \
                                Makefile
	@mkdir -p $(dir $@)
	scripts/embed-lua.sh $(LUA_SCRIPTS) > $@.tmp && mv $@.tmp $@

$(BUILD)/common/lua_scripts.o: $(BUILD)/common/lua_scripts.c
	$(CC) $(ALL_CFLAGS) $(CORE) -c $< -o $@

$(BUILD)/libsluice.a: $(LIB_OBJ)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/libsluice.so: $(LIB_OBJ)
	$(CC) -shared -Wl,-soname,libsluice.so.$(SOMAJOR) -o $@ $^ $(ALL_LDFLAGS) $(LIBS)

# The version and the soname's major number come from common.h alone.
VERSION := $(shell sed -n 's/^\#define SLUICE_VERSION "\(.*\)"/\1/p' common/include/sluice/common.h)
SOMAJOR := $(shell sed -n 's/^\#define SLUICE_VERSION_MAJOR \([0-9]*\)$$/\1/p' common/include/sluice/common.h)
PC_SUBST = sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' sluice.pc.in

$(BUILD)/sluice.pc: sluice.pc.in Makefile
	@mkdir -p $(BUILD)
	$(PC_SUBST) > $@

$(BUILD)/sluice-producer: $(patsubst %.c,$(BUILD)/%.o,$(wildcard producer/daemon/*.c)) $(CLI_OBJ) \
                          $(JOB_OBJ) $(BUILD)/libsluice.a
	$(CC) -o $@ $^ $(ALL_LDFLAGS) $(LIBS)

$(BUILD)/sluice-consume: $(patsubst %.c,$(BUILD)/%.o,$(wildcard consumer/cli/*.c)) $(CLI_OBJ) \
                         $(BUILD)/libsluice.a
	$(CC) -o $@ $^ $(ALL_LDFLAGS) $(LIBS)

$(BUILD)/sluice-ctl: $(patsubst %.c,$(BUILD)/%.o,$(wildcard ctl/*.c)) $(CLI_OBJ) $(JOB_OBJ) \
                     $(BUILD)/libsluice.a
	$(CC) -o $@ $^ $(ALL_LDFLAGS) $(LIBS)

# The example trainer (examples/trainer, the demo's ranks), linked with the
# uninstalled library; examples/trainer/Makefile builds it against an
# installed one through pkg-config.
$(BUILD)/sluice-trainer: $(BUILD)/examples/trainer/trainer.o $(BUILD)/libsluice.a
	$(CC) -o $@ $^ $(ALL_LDFLAGS) $(LIBS) -lm

$(UNIT_BIN): $(UNIT_SRC:%.c=$(BUILD)/%.o) $(JOB_OBJ) $(CLI_OBJ) $(BUILD)/libsluice.a
	$(CC) -o $@ $^ $(ALL_LDFLAGS) $(LIBS) -lm

# Test data generator: the integration tests and docs/JOBS.md's "Try it".
$(BUILD)/gen-tfrecord: $(BUILD)/tests/tools/gen-tfrecord.o $(BUILD)/producer/job/crc32c.o
	$(CC) -o $@ $^ $(ALL_LDFLAGS) $(LIBS)

# Pushes tensor batches of known contents (the Python tensor test).
$(BUILD)/push-tensors: $(BUILD)/tests/tools/push-tensors.o $(BUILD)/libsluice.a
	$(CC) -o $@ $^ $(ALL_LDFLAGS) $(LIBS)

# A consumer that takes batches and holds them until killed (consumer tests),
# and the timing of next() on prefetched batches.
$(BUILD)/hold: $(BUILD)/tests/tools/hold.o $(BUILD)/libsluice.a
	$(CC) -o $@ $^ $(ALL_LDFLAGS) $(LIBS)

$(BUILD)/next-latency: $(BUILD)/tests/tools/next-latency.o $(BUILD)/libsluice.a
	$(CC) -o $@ $^ $(ALL_LDFLAGS) $(LIBS)

# A TCP proxy that delays each direction by a fixed time without limiting
# bandwidth (the bench at network latency; delay_proxy.sh). Plain libevent.
$(BUILD)/delay-proxy: $(BUILD)/tests/tools/delay-proxy.o
	$(CC) -o $@ $^ $(ALL_LDFLAGS) $(LIBS)

unit: $(BUILD)/delay-proxy

# Drives the cluster router: slots, redirects, failover (cluster_router.sh).
$(BUILD)/cluster-probe: $(BUILD)/tests/tools/cluster-probe.o $(BUILD)/libsluice.a
	$(CC) -o $@ $^ $(ALL_LDFLAGS) $(LIBS)

unit: $(BUILD)/cluster-probe

unit: all $(UNIT_BIN) $(BUILD)/gen-tfrecord $(BUILD)/push-tensors $(BUILD)/hold $(BUILD)/next-latency

# Load tools of the benchmark (bench/bench.py), on the library's public API,
# and the proxy that puts a network's latency between them and Redis.
BENCH_TOOLS := $(BUILD)/bench-produce $(BUILD)/bench-consume $(BUILD)/delay-proxy
# Debian packages only the bench uses, both optional (the report says what
# it ran without): the strong Python peer's reply parser, and Fashion-MNIST,
# the payload of the compression part.
BENCH_PKGS := python3-hiredis dataset-fashion-mnist

$(BUILD)/bench-%: $(BUILD)/tests/tools/bench-%.o $(BUILD)/libsluice.a
	$(CC) -o $@ $^ $(ALL_LDFLAGS) $(LIBS)

# One run against a private redis-server: prints the table and writes it to
# bench/results.md (bench/README.md explains what is measured).
bench: deps
	@scripts/install-deps.sh $(BENCH_PKGS) || echo "make bench: without $(BENCH_PKGS):" \
	    "the strong peer parses replies in Python and the compression payload is text" >&2
	@$(MAKE) --no-print-directory all $(BENCH_TOOLS)
	@BUILD=$(BUILD) bench/run.sh

# IDX reader check against Python (tests/integration/idx_python.sh).
$(BUILD)/dump-idx: $(BUILD)/tests/tools/dump-idx.o $(JOB_OBJ) $(BUILD)/libsluice.a
	$(CC) -o $@ $^ $(ALL_LDFLAGS) $(LIBS)

# The example --transform plugin (examples/transform/upper.c): the unit
# tests and the README's example load it.
$(BUILD)/examples/libupper.so: examples/transform/upper.c common/include/sluice/transform.h \
                               common/include/sluice/batch.h
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(PUB) -shared $< -o $@ $(ALL_LDFLAGS)

unit: $(BUILD)/dump-idx $(BUILD)/examples/libupper.so

# The clock-skew shim (LD_PRELOAD; SLUICE_SKEW_MS shifts the wall clock) of
# tests/integration/clock_skew.sh and tests/faults/churn.sh. Built without
# $(SAN): a preloaded sanitized object would need its runtime loaded first;
# with default visibility: its functions must interpose on libc's.
$(BUILD)/libskew.so: tests/tools/skew.c
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) -fvisibility=default $(CFLAGS) -shared $< -o $@ $(LDFLAGS) -ldl

unit: $(BUILD)/libskew.so

# What the tests need besides the build's packages: PyTorch
# (python_torch, torch_ddp) and Fashion-MNIST (demo_smoke, torch_ddp).
TEST_PKGS := python3-torch dataset-fashion-mnist

# The README's test command: unit tests, then integration tests, each on a
# private redis-server; ends with "N passed, N failed".
test: deps
	@scripts/install-deps.sh $(TEST_PKGS)
	@$(MAKE) --no-print-directory unit
	@BUILD=$(BUILD) tests/run.sh

# The fault suite (tests/faults/run.sh): kill -9 of producers and consumers,
# Redis killed, its AOF cut back by its last second, its clients dropped,
# put to sleep, at maxmemory; each scenario on a private redis-server.
# FAULT_SEED=N replays a run's choices.
test-faults: deps
	@$(MAKE) --no-print-directory unit
	@BUILD=$(BUILD) tests/faults/run.sh
.PHONY: test-faults

# The churn soak (tests/soak.sh): tests/faults/churn.sh, one seeded random
# scenario of kills, SIGTERM, SIGSTOP past the lease, scale-downs, wrong
# clocks and Redis restarts, for SEEDS consecutive seeds (from SOAK_SEED0,
# else a random one). `make test` runs one seed of it, as every fault.
SEEDS ?= 20
soak: deps
	@$(MAKE) --no-print-directory unit
	@BUILD=$(BUILD) tests/soak.sh $(SEEDS)
.PHONY: soak

asan:
	$(MAKE) BUILD=build-asan SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" test

# The integration tests whose assertions are not about time, with every
# sluice program under valgrind memcheck: any error or leak fails them.
# Two at a time (TEST_JOBS overrides): under valgrind they are busy on the
# CPU, not waiting, so more than the cores only stretches each.
VALGRIND_TESTS ?= exactly_once corrupt_tfrecord cli_errors redis_restart oom \
                  consumer_garbage consumer_coordinated consumer_kill consumer_poison \
                  job_exactly_once job_exec_fail job_manifest_error \
                  partition_consume partition_ctl cluster_exactly_once
valgrind: deps
	@scripts/install-deps.sh valgrind
	@$(MAKE) --no-print-directory unit
	@scripts/valgrind-tree.sh $(BUILD) $(BUILD)-valgrind
	@BUILD=$(BUILD)-valgrind TEST_TIMEOUT=600 TEST_JOBS=$(or $(TEST_JOBS),2) \
	    tests/run.sh $(VALGRIND_TESTS)

demo: deps
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) scripts/demo.sh

# The Python package (python/sluice) goes where /usr/bin/python3 looks for
# the packages of PREFIX: Debian's python3 reads /usr/lib/python3/dist-packages
# and /usr/local/lib/python3.X/dist-packages (any other PREFIX: put PYTHONDIR
# on PYTHONPATH). Its files are copied, not installed with pip, which
# refuses to write to the system's Python (PEP 668). _installed.py records
# the version and where the library is, which the package loads first.
PYTHON    ?= /usr/bin/python3
PYTHON_XY  = $(or $(shell $(PYTHON) -c 'import sys; print("python%d.%d" % sys.version_info[:2])' \
                          2>/dev/null),python3)
PYTHONDIR ?= $(if $(filter /usr,$(PREFIX)),$(PREFIX)/lib/python3/dist-packages,$(PYTHONDIR_XY))
PYTHONDIR_XY = $(PREFIX)/lib/$(PYTHON_XY)/dist-packages
PY_SRC    := $(filter-out python/sluice/_installed.py,$(wildcard python/sluice/*.py))
# Run after installing to (or removing from) the real root as root, so that
# the dynamic loader finds libsluice.so.$(SOMAJOR) by its soname.
LDCONFIG  ?= ldconfig
RUN_LDCONFIG = if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ]; then echo $(LDCONFIG); $(LDCONFIG); fi

install: all
	install -d $(DESTDIR)$(PREFIX)/include/sluice $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/bin
	install -m 644 $(HEADERS) $(DESTDIR)$(PREFIX)/include/sluice/
	install -m 644 $(BUILD)/libsluice.a $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(BUILD)/libsluice.so $(DESTDIR)$(PREFIX)/lib/libsluice.so.$(SOMAJOR)
	ln -sf libsluice.so.$(SOMAJOR) $(DESTDIR)$(PREFIX)/lib/libsluice.so
	# Written here, not copied from build/, so that it names this PREFIX.
	$(PC_SUBST) > $(DESTDIR)$(PREFIX)/lib/pkgconfig/sluice.pc
	install -m 755 $(PROGRAMS) $(DESTDIR)$(PREFIX)/bin/
	rm -rf $(DESTDIR)$(PYTHONDIR)/sluice
	install -d $(DESTDIR)$(PYTHONDIR)/sluice
	install -m 644 $(PY_SRC) $(DESTDIR)$(PYTHONDIR)/sluice/
	printf "# Recorded at installation; not in the source tree.\nVERSION = '%s'\nLIBDIR = '%s'\n" \
	    '$(VERSION)' '$(PREFIX)/lib' > $(DESTDIR)$(PYTHONDIR)/sluice/_installed.py
	@echo "sluice: the Python package is in $(PYTHONDIR)"
	@$(RUN_LDCONFIG)

uninstall:
	rm -rf $(DESTDIR)$(PREFIX)/include/sluice $(DESTDIR)$(PYTHONDIR)/sluice
	rm -f $(DESTDIR)$(PREFIX)/lib/libsluice.a $(DESTDIR)$(PREFIX)/lib/libsluice.so \
	      $(DESTDIR)$(PREFIX)/lib/libsluice.so.$(SOMAJOR) $(DESTDIR)$(PREFIX)/lib/pkgconfig/sluice.pc
	rm -f $(PROGRAMS:$(BUILD)/%=$(DESTDIR)$(PREFIX)/bin/%)
	@$(RUN_LDCONFIG)

clean:
	rm -rf build build-asan build-valgrind

# ---- fuzzing ---------------------------------------------------------------
# `make fuzz` runs every libFuzzer target for FUZZ_TIME seconds (clang), on a
# scratch copy of its seed corpus tests/fuzz/corpus/NAME. The replay
# binaries run the seeds and tests/fuzz/regress/NAME (inputs of fixed
# crashes) through the same checks with any compiler, in `make test`.
FUZZ_TARGETS ?= wire url addr tfrecord idx manifest
FUZZ_TIME ?= 60
FUZZ_CC ?= clang
FUZZ_FLAGS := -g -O1 -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined $(INC_tests)
FUZZ_BIN := $(FUZZ_TARGETS:%=$(BUILD)/fuzz/fuzz-%)
REPLAY_BIN := $(FUZZ_TARGETS:%=$(BUILD)/fuzz/replay-%)

$(BUILD)/fuzz/fuzz-%: tests/fuzz/fuzz_%.c $(LIB_SRC) $(JOB_SRC) $(BUILD)/common/lua_scripts.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) $(shell pkg-config --cflags $(PKGS)) $^ -o $@ $(LIBS) -ldl

$(BUILD)/fuzz/replay-%: tests/fuzz/fuzz_%.c tests/fuzz/replay.c $(JOB_OBJ) $(BUILD)/libsluice.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(INC_tests) $^ -o $@ $(ALL_LDFLAGS) $(LIBS) -ldl

unit: $(REPLAY_BIN)

fuzz: deps
	@scripts/install-deps.sh clang libclang-rt-14-dev
	@$(MAKE) --no-print-directory $(FUZZ_BIN)
	@FUZZ_TIME=$(FUZZ_TIME) BUILD=$(BUILD) tests/fuzz/run.sh $(FUZZ_TARGETS)
.PHONY: fuzz

# Validates docker-compose.yml offline (syntax, schema, variables) with the
# example settings; needs Debian's docker-compose, no Docker daemon.
# tests/integration/compose_check.sh runs it, plus checks of the content.
compose-check:
	@scripts/install-deps.sh
	docker-compose -f docker-compose.yml --env-file .env.example config -q
.PHONY: compose-check
