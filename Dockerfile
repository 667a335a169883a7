# shoal's container image: the combined `shoal` binary (UDP, HTTP, WebTorrent) on
# Debian bookworm-slim, run as a non-root user, configured by a mounted
# /etc/shoal/shoal.toml and SHOAL__ variables. documents/deployment.md ("Containers")
# says how to run it and what the host must allow.
#
#   docker build -t shoal .                      (or podman build)
#   docker run -p 6969:6969/udp -p 6969:6969 -p 8000:8000 shoal
#
# The HTTP and WebTorrent trackers run on epoll (network.io_backend's default), which
# Docker's default seccomp profile allows; it refuses io_uring, which they use only
# where the config chooses it.
#
# Build arguments (only where a registry mirror or a pinned toolchain is wanted; the
# defaults are what `docker build -t shoal .` uses):
#   RUST_IMAGE   the toolchain image of the build stage
#   BASE_IMAGE   the runtime image
#
# Every stage is named by an image reference, never by a build argument: podman 4.3
# (Debian 12) does not resolve `FROM ${ARG}` to a stage of this file when the
# argument keeps its default.
ARG RUST_IMAGE=docker.io/library/rust:1.95-bookworm
ARG BASE_IMAGE=docker.io/library/debian:bookworm-slim

FROM ${RUST_IMAGE} AS build
WORKDIR /src
COPY . .
# Symbols stay (backtraces name functions); line tables go.
RUN cargo build --release --locked -p shoal \
    && install -D target/release/shoal /out/shoal \
    && strip --strip-debug /out/shoal

FROM ${BASE_IMAGE}
COPY --from=build /out/shoal /usr/bin/shoal
# A system user with a fixed id (volumes and Kubernetes' runAsUser can name it); its
# home is the state directory, a volume so that swarms outlive the container.
RUN groupadd --system --gid 10001 shoal \
    && useradd --system --uid 10001 --gid shoal --home-dir /var/lib/shoal \
        --shell /usr/sbin/nologin shoal \
    && install -d -o shoal -g shoal -m 0750 /var/lib/shoal \
    && install -d -m 0755 /etc/shoal \
    && /usr/bin/shoal -p > /etc/shoal/shoal.toml \
    && chmod 0644 /etc/shoal/shoal.toml
# What differs from the built-in defaults in a container: the monitoring endpoint on
# (the health check and Prometheus need it) on every address, so that it can be
# published; swarms written to the volume. Variables win over the file's keys.
ENV SHOAL__METRICS__ENABLED=true \
    SHOAL__METRICS__ADDRESS=0.0.0.0:9969 \
    SHOAL__UDP__STATE__DIRECTORY=/var/lib/shoal \
    SHOAL__HTTP__STATE__DIRECTORY=/var/lib/shoal
USER shoal:shoal
VOLUME /var/lib/shoal
# UDP and HTTP trackers, WebTorrent, monitoring (/metrics, /health, /stats.json).
EXPOSE 6969/udp 6969/tcp 8000/tcp 9969/tcp
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
    CMD ["/usr/bin/shoal", "health", "-c", "/etc/shoal/shoal.toml"]
# SIGTERM (docker stop) shuts down cleanly and writes the swarms to the volume.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/bin/shoal"]
CMD ["-c", "/etc/shoal/shoal.toml"]
