# syntax=docker/dockerfile:1
# Multi-stage build: compile in the Rust image, run in a small Debian image as a
# non-root user. The same image runs the writer (`isir run`) and the read replicas
# (`isir serve`); configuration comes from ISIR_ variables or /etc/isir/isir.toml.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
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
ENV ISIR_API__BIND=0.0.0.0:8080
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=3s CMD curl -fs http://127.0.0.1:8080/healthz || exit 1
ENTRYPOINT ["/usr/local/bin/isir"]
CMD ["run"]
