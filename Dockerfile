# sluice image: the programs (sluice-producer, sluice-ctl, sluice-consume),
# the example trainer (sluice-trainer) and the SDK a trainer image builds
# on: libsluice (.so, .a), its headers, sluice.pc and the Python package,
# on Debian 12, all under /usr/local.
#
#   docker build -t sluice:local .
#   docker build -t sluice:local --build-arg EXTRA_PACKAGES=dataset-fashion-mnist .
#   docker build -t sluice:local --build-arg EXTRA_PACKAGES="python3 python3-numpy" .
#
# Two stages: the build stage has the compiler and the -dev packages; the
# runtime stage gets only the shared libraries the programs load, and runs
# as an unprivileged user. docker-compose.yml builds it for every service;
# docs/DEPLOY.md ("The image") shows a trainer image built FROM it or
# copying from it.

# ---- build ------------------------------------------------------------------
FROM debian:bookworm-slim AS build

RUN apt-get update \
 && apt-get install -y --no-install-recommends \
        build-essential pkg-config \
        libhiredis-dev libevent-dev libmsgpack-dev zlib1g-dev libssl-dev \
        liblz4-dev libzstd-dev \
        python3 \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY . .

# `make` only builds (`make deps` would also install the test tools); this
# stage installed what compiling needs. python3 is here for `make install`,
# which asks it where Debian's python3 looks for the packages of /usr/local
# (/usr/local/lib/python3.11/dist-packages), and to import the installed
# package once: its check of the library it loads runs at image build.
# install-trainer.sh makes sure the example trainer (examples/trainer/) is
# next to the other programs.
RUN rm -rf build \
 && make -j"$(nproc)" all build/sluice-trainer \
 && make install PREFIX=/usr/local DESTDIR=/out \
 && bash docker/install-trainer.sh /out/usr/local/bin \
 && PYTHONDONTWRITEBYTECODE=1 SLUICE_LIB=/out/usr/local/lib/libsluice.so.0 \
    PYTHONPATH="$(echo /out/usr/local/lib/python3*/dist-packages)" \
    python3 -c 'import sluice; print("sluice", sluice.__version__, "imports")'

# ---- runtime ----------------------------------------------------------------
FROM debian:bookworm-slim

# libssl3 is for rediss:// addresses, ca-certificates the CAs they trust
# when SLUICE_TLS_CA_FILE names none.
# EXTRA_PACKAGES: more Debian packages for the runtime image, e.g.
# dataset-fashion-mnist (the data of the example job; compose passes it),
# or "python3 python3-numpy" for the Python package.
ARG EXTRA_PACKAGES=""

RUN apt-get update \
 && apt-get install -y --no-install-recommends \
        libhiredis0.14 libevent-2.1-7 libevent-pthreads-2.1-7 libmsgpackc2 zlib1g \
        liblz4-1 libzstd1 \
        libssl3 ca-certificates \
        $EXTRA_PACKAGES \
 && rm -rf /var/lib/apt/lists/*

# Everything `make install` wrote: bin/, include/sluice/, lib/libsluice.*,
# lib/pkgconfig/sluice.pc and lib/python3.11/dist-packages/sluice/ (found
# by Debian's python3, which EXTRA_PACKAGES or a derived image installs).
COPY --from=build /out/usr/local/ /usr/local/
COPY docker/submit.sh /usr/local/bin/sluice-compose-submit
COPY docker/healthcheck.sh /usr/local/bin/sluice-healthcheck
COPY docker/fashion-mnist.manifest /usr/local/share/sluice/fashion-mnist.manifest

# A fixed uid so that files written to volumes have a predictable owner.
RUN chmod 755 /usr/local/bin/sluice-compose-submit /usr/local/bin/sluice-healthcheck \
 && ldconfig \
 && useradd --system --uid 10001 --user-group --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin sluice

USER sluice
WORKDIR /tmp
CMD ["sluice-ctl", "--help"]
