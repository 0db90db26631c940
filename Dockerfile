# sluice image: the programs (sluice-producer, sluice-ctl, sluice-consume),
# libsluice.so and the example trainer (sluice-trainer), on Debian 12.
#
#   docker build -t sluice:local .
#   docker build -t sluice:local --build-arg EXTRA_PACKAGES=dataset-fashion-mnist .
#
# Two stages: the build stage has the compiler and the -dev packages; the
# runtime stage gets only the shared libraries the programs load, and runs
# as an unprivileged user. docker-compose.yml builds it for every service.

# ---- build ------------------------------------------------------------------
FROM debian:bookworm-slim AS build

RUN apt-get update \
 && apt-get install -y --no-install-recommends \
        build-essential pkg-config \
        libhiredis-dev libevent-dev libmsgpack-dev zlib1g-dev \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY . .

# `make` only builds (`make deps` would also install the test tools); this
# stage installed what compiling needs.
# build/sluice-trainer is the example trainer (examples/trainer/), which
# `make install` does not install: install-trainer.sh puts it next to the
# other programs.
RUN rm -rf build \
 && make -j"$(nproc)" all build/sluice-trainer \
 && make install PREFIX=/usr/local DESTDIR=/out \
 && bash docker/install-trainer.sh /out/usr/local/bin

# ---- runtime ----------------------------------------------------------------
FROM debian:bookworm-slim

# EXTRA_PACKAGES: more Debian packages for the runtime image, e.g.
# dataset-fashion-mnist (the data of the example job; compose passes it).
ARG EXTRA_PACKAGES=""

RUN apt-get update \
 && apt-get install -y --no-install-recommends \
        libhiredis0.14 libevent-2.1-7 libevent-pthreads-2.1-7 libmsgpackc2 zlib1g \
        $EXTRA_PACKAGES \
 && rm -rf /var/lib/apt/lists/*

COPY --from=build /out/usr/local/bin/ /usr/local/bin/
COPY --from=build /out/usr/local/lib/libsluice.so.0 /usr/local/lib/
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
