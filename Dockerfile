# syntax=docker/dockerfile:1
# seatlock: build with `docker compose build`, or `docker build -t seatlock .`

FROM rust:1-bookworm AS build
WORKDIR /src
# The e2e workspace member depends on playwright-rs; never fetch its driver here.
ENV PLAYWRIGHT_SKIP_DRIVER_DOWNLOAD=1
# The etcd-client crate (the etcd lease store) compiles etcd's protobufs with protoc.
RUN apt-get update \
 && apt-get install -y --no-install-recommends protobuf-compiler \
 && rm -rf /var/lib/apt/lists/*
COPY . .
# migrations/, templates/ and web/ are compiled into the binary. Cache mounts keep the
# registry and target dir between builds; the binary is copied out of the mounted target.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p seatlock --bin seatlock \
 && install -m 0755 target/release/seatlock /usr/local/bin/seatlock

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 seatlock \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin seatlock
COPY --from=build /usr/local/bin/seatlock /usr/local/bin/seatlock
COPY data/venues /usr/local/share/seatlock/venues
COPY data/auctions.json /usr/local/share/seatlock/auctions.json
ENV SEATLOCK_BIND=0.0.0.0:3000 \
    SEATLOCK_VENUES=/usr/local/share/seatlock/venues \
    SEATLOCK_AUCTIONS=/usr/local/share/seatlock/auctions.json
USER 10001:10001
EXPOSE 3000
ENTRYPOINT ["seatlock"]
CMD ["serve"]
