#!/usr/bin/env bash
# Several `seatlock serve` processes behind HAProxy (docs/scale-out.md).
#
#   scripts/scale.sh run N     N backends (each on its own free loopback ports, one shared
#                              SEATLOCK_SECRET) behind HAProxy on SEATLOCK_BIND (default
#                              127.0.0.1:3000), its stats on SEATLOCK_PROXY_STATS_BIND
#                              (default 127.0.0.1:8404). Needs the stores' environment
#                              (`source .run/env`), a migrated and seeded database and the
#                              server binary SEATLOCK_BIN (default target/release/seatlock):
#                              `make scale N=3` does all of it. Ctrl-C stops everything.
#   scripts/scale.sh config BIND STATS_BIND HOST:PORT...
#                              print scripts/haproxy.cfg rendered for those backends: the
#                              one place the proxy's configuration is written (make scale,
#                              the tests' seatlock_harness::haproxy, docker compose).
#
# Every other setting of the backends comes from the environment, as for `seatlock serve`
# (a lease store chosen there reaches every backend).
set -euo pipefail
SCRIPTS="$(cd "$(dirname "$0")" && pwd)"

die() { echo "scale: $*" >&2; exit 1; }

config() { # config BIND STATS_BIND HOST:PORT...
  [ $# -ge 3 ] || die "usage: $0 config BIND STATS_BIND HOST:PORT..."
  local bind="$1" stats="$2" servers="" i=0 backend
  shift 2
  for backend in "$@"; do
    i=$((i + 1))
    servers+="    server app$i $backend cookie app$i"$'\n'
  done
  # HAProxy needs about two open files per connection (client and server side) and
  # refuses to start if it cannot raise its limit to match: half of this shell's hard
  # limit, less a margin, at most 32768.
  local files maxconn
  files="$(ulimit -Hn)"
  [ "$files" = unlimited ] && files=1048576
  maxconn=$(((files - 1000) / 2))
  [ "$maxconn" -le 32768 ] || maxconn=32768
  local text
  text="$(cat "$SCRIPTS/haproxy.cfg")"
  text="${text//@MAXCONN@/$maxconn}"
  text="${text//@BIND@/$bind}"
  text="${text//@STATS_BIND@/$stats}"
  text="${text//@SERVERS@/${servers%$'\n'}}"
  printf '%s\n' "$text"
}

# The address a `seatlock serve` announces on stdout ("serving at http://HOST:PORT") in
# file $1, once it has; fails after 30 s or if process $2 exits first.
announced() {
  local file="$1" pid="$2" address
  for _ in $(seq 300); do
    address="$(sed -n 's|.*serving at http://\([^ ]*\).*|\1|p' "$file" 2>/dev/null)"
    if [ -n "$address" ]; then echo "$address"; return; fi
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

run() { # run N
  local n="${1:-}"
  [[ "$n" =~ ^[1-9][0-9]?$ ]] || die "N must be a number from 1 to 99, not '${n}'"
  [ -n "${DATABASE_URL:-}" ] && [ -n "${REDIS_URL:-}" ] || die "source .run/env first (make scale does)"
  command -v haproxy >/dev/null || "$SCRIPTS/services.sh" need haproxy haproxy
  local bin="${SEATLOCK_BIN:-target/release/seatlock}"
  [ -x "$bin" ] || die "$bin is missing: cargo build --release --bin seatlock"
  local bind="${SEATLOCK_BIND:-127.0.0.1:3000}"
  local stats="${SEATLOCK_PROXY_STATS_BIND:-127.0.0.1:8404}"
  local dir
  dir="$(cd "$SCRIPTS/.." && pwd)/.run/scale"
  mkdir -p "$dir"
  rm -f "$dir"/app*.out "$dir"/app*.log
  # One deployment: every backend signs and checks the same CSRF tokens.
  if [ -z "${SEATLOCK_SECRET:-}" ]; then
    SEATLOCK_SECRET="$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')"
  fi
  export SEATLOCK_SECRET

  PIDS=()
  trap 'trap - EXIT INT TERM; [ ${#PIDS[@]} -eq 0 ] || kill "${PIDS[@]}" 2>/dev/null; wait 2>/dev/null; echo "scale: stopped" >&2' EXIT INT TERM
  local backends=() i pid address
  for i in $(seq "$n"); do
    SEATLOCK_BIND=127.0.0.1:0 SEATLOCK_METRICS_BIND=127.0.0.1:0 \
      "$bin" serve >"$dir/app$i.out" 2>"$dir/app$i.log" &
    PIDS+=($!)
  done
  for i in $(seq "$n"); do
    pid="${PIDS[$((i - 1))]}"
    address="$(announced "$dir/app$i.out" "$pid")" || die "app$i did not start: see $dir/app$i.log"
    backends+=("$address")
    echo "app$i: http://$address (pid $pid), $(sed -n 's/^metrics at //p' "$dir/app$i.out"), log $dir/app$i.log"
  done
  config "$bind" "$stats" "${backends[@]}" >"$dir/haproxy.cfg"
  haproxy -q -c -f "$dir/haproxy.cfg" || die "haproxy refused $dir/haproxy.cfg"
  haproxy -db -f "$dir/haproxy.cfg" &
  PIDS+=($!)
  echo "HAProxy: http://$bind -> $n backends (least connections, /readyz checks, /livez when none is ready); stats http://$stats/ ; config $dir/haproxy.cfg"
  echo "Open http://$bind in two browsers; kill a backend (kill PID) and keep buying. Ctrl-C stops everything."
  wait "${PIDS[-1]}"
}

case "${1:-}" in
  run) shift; run "$@" ;;
  config) shift; config "$@" ;;
  *) echo "usage: $0 run N | config BIND STATS_BIND HOST:PORT..." >&2; exit 2 ;;
esac
