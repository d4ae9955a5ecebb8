# kstage's container image: `docker build -t kstage .` at the repository root.
#
# The build stage compiles the release binary with the locked dependencies; the image
# holds only the binary, kstage's own node and pod Stages (also shipped as the ConfigMap
# deploy/base mounts) and, for the default glibc build, the C runtime it links against.
# It runs as the distroless `nonroot` user (65532), as deploy/base/deployment.yaml asks.
#
# A fully static binary on a `static` base instead (no libc in the image):
#   docker build -t kstage:static --build-arg TARGET=x86_64-unknown-linux-musl \
#     --build-arg BASE=gcr.io/distroless/static-debian12:nonroot .
ARG BASE=gcr.io/distroless/cc-debian12:nonroot

FROM docker.io/library/rust:1.95-bookworm AS build
ARG TARGET=x86_64-unknown-linux-gnu
RUN if [ "$TARGET" != x86_64-unknown-linux-gnu ]; then \
      apt-get update && apt-get install -y --no-install-recommends musl-tools && \
      rustup target add "$TARGET"; \
    fi
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin kstage --target "$TARGET" \
 && cp "target/$TARGET/release/kstage" /kstage

FROM ${BASE}
COPY --from=build /kstage /usr/bin/kstage
COPY --from=build /src/examples/stages /usr/share/kstage/stages
USER 65532:65532
ENTRYPOINT ["/usr/bin/kstage"]
CMD ["--help"]
