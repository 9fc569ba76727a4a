# syntax=docker/dockerfile:1
# Multi-stage build: compile in the Rust image, run in a small Debian image as a
# non-root user. The same image runs the writer (`isir run`) and the read replicas
# (`isir serve`); configuration comes from ISIR_ variables or /etc/isir/isir.toml.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
# SQLite built to map a whole file (`api.sqlite_mmap_mib`).
COPY .cargo ./.cargo
# The dependencies in a layer of their own, built against empty targets: a change to
# src/ rebuilds only this crate. The crate's own fingerprints are removed afterwards so
# that the real sources (whatever their timestamps) are compiled.
RUN mkdir -p src benches \
    && echo 'fn main() {}' > src/main.rs && touch src/lib.rs \
    && for b in parse store api_fixture; do echo 'fn main() {}' > "benches/$b.rs"; done \
    && cargo build --release --locked --bin isir \
    && rm -rf src benches target/release/.fingerprint/isir-* target/release/deps/isir-* \
        target/release/deps/libisir-* target/release/isir*
COPY src ./src
COPY migrations ./migrations
COPY data ./data
COPY benches ./benches
RUN cargo build --release --locked --bin isir && strip target/release/isir

FROM debian:bookworm-slim AS runtime
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --home /var/lib/isir --create-home isir
COPY --from=build /src/target/release/isir /usr/local/bin/isir
USER isir
WORKDIR /var/lib/isir
# The data directory: the embedded SQLite replica (database.url defaults to
# sqlite://isir.db here), exports and snapshots. Mount a volume on it.
VOLUME ["/var/lib/isir"]
ENV ISIR_API__BIND=0.0.0.0:8080
# One JSON object a log line, for the container runtime's log collector.
ENV ISIR_LOG__FORMAT=json
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=3s CMD curl -fs http://127.0.0.1:8080/healthz || exit 1
ENTRYPOINT ["/usr/local/bin/isir"]
CMD ["run"]
