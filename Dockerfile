# kstage's container image: `docker build -t kstage .` at the repository root.
#
# The build stage compiles the release binary with the locked dependencies; the image
# holds only the binary, kstage's own node and pod Stages (used by deploy/kstage.yaml
# through `--stages /usr/share/kstage/stages`) and the C runtime it links against.
FROM docker.io/library/rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin kstage

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/kstage /usr/bin/kstage
COPY --from=build /src/examples/stages /usr/share/kstage/stages
USER nonroot
ENTRYPOINT ["/usr/bin/kstage"]
CMD ["--help"]
