# One image with Lectern's binaries: lectern-api and lectern-projector, and lectern-dev
# for compose's optional demo seeder (compose.yaml picks which one a service runs). Build: `docker compose build`, or
# `docker build -t lectern:local .` (needs BuildKit, the default since Docker 23, whose built-in Dockerfile frontend
# reads `RUN --mount`: no `# syntax=` line, so an offline build pulls no frontend image).

# --- build ------------------------------------------------------------------------
# The toolchain is the workspace's rust-version (Cargo.toml); tests/tests/ops checks
# that it is not older than that or than any locked dependency's.
FROM rust:1.89-bookworm AS builder
WORKDIR /src
COPY . .
# The cache mounts keep the registry and compiled dependencies between builds, so a
# source change recompiles only Lectern's crates. The target directory is a cache
# mount (gone after this step), so the binaries are copied out of it.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git/db \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p lectern-api -p lectern-projector -p lectern-dev \
        --bin lectern-api --bin lectern-projector --bin lectern-dev \
    && mkdir -p /out \
    && cp target/release/lectern-api target/release/lectern-projector target/release/lectern-dev /out/

# --- run --------------------------------------------------------------------------
# Distroless: glibc, libgcc, CA certificates and nothing else (no shell, no package
# manager). Health checks run the binaries' own `healthcheck` subcommand.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=builder /out/lectern-api /usr/local/bin/lectern-api
COPY --from=builder /out/lectern-projector /usr/local/bin/lectern-projector
COPY --from=builder /out/lectern-dev /usr/local/bin/lectern-dev
# Inside a container the loopback default would be unreachable from outside it.
ENV LECTERN_LISTEN=0.0.0.0:8080
# The distroless "nonroot" user, by number so Kubernetes' runAsNonRoot can verify it.
USER 65532:65532
EXPOSE 8080
CMD ["lectern-api", "serve"]
