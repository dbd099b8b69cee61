# seatlock: two commands.
#   make demo   private Redis + Postgres (+ etcd, ZooKeeper), migrate, seed, serve at http://127.0.0.1:3000
#               (STORE=etcd: the leases in a private one-member etcd instead of Redis;
#               STORE=zookeeper: in a private one-member ZooKeeper;
#               STORE=cluster: leases and sessions on a private Redis Cluster, docs/cluster.md)
#   make test   the same services, every test (unit, integration, end-to-end), fmt, clippy, rustdoc
#
# More:
#   make lab       make demo with the race lab (the seatlock-lab binary, lab/): the article's
#                  table built live at http://127.0.0.1:3000/lab
#   make scale     N=3 servers behind HAProxy at http://127.0.0.1:3000 (docs/scale-out.md;
#                  SERVER=seatlock-lab: the race lab's servers)
#   make race      load-test race: which purchase strategies sell a seat twice, then groups: seat by seat vs one group hold
#   make failover  load-test failover: a Redis failover under Sentinel, guard off and on
#   make nemesis   load-test nemesis: faults from a seed, every operation checked (SEED=, NEMESIS_SECONDS=, STORE=)
#   make linearizability  the history checker on all of Porcupine's test histories (verdicts, times)
#   make onsale    load-test onsale: a crowd of 20,000 at the on-sale against N=1 server(s) behind HAProxy
#                  (N=3, WAITING_ROOM=on, BUYERS=); writes target/onsale/report.json and report.html
#   make bench     the hot paths side by side with redis-benchmark, rslock, raw SET NX, pgbench
#   make bids      load-test bids: one auction item's bid rate with WATCHERS=1000 pages watching it live
#   make lint      fmt, clippy -D warnings and rustdoc -D warnings only
#   make services  start the private services; make stop stops them
SHELL := /bin/bash
.ONESHELL:
.SHELLFLAGS := -eu -o pipefail -c
export PLAYWRIGHT_SKIP_DRIVER_DOWNLOAD := 1
CARGO ?= cargo
# Where cargo puts the release binaries (CARGO_TARGET_DIR when set, as cargo does).
RELEASE := $(or $(CARGO_TARGET_DIR),target)/release
# The lease store of `make demo`, `make scale` and `make nemesis`: redis (default), etcd or
# zookeeper; `make demo` and `make scale` also take cluster (three masters, three replicas).
STORE ?= redis
# The server binary of `make demo` and `make scale`: seatlock (the product, built without the
# pause seam) or seatlock-lab (the product with the race lab, lab/). Each is its own package.
SERVER ?= seatlock

.PHONY: demo lab scale test race failover nemesis linearizability onsale bench bids services stop e2e-driver lint

services:
	scripts/services.sh up >/dev/null

stop:
	scripts/services.sh down

# The release server SERVER over the migrated, seeded database of .run/env (demo, lab and
# scale), its leases in the store STORE names. Built alone (-p $(SERVER)): cargo unifies
# features only across the packages of one build, so the product's binary never gets the
# lab's `failpoints`.
define release_server
	case "$(STORE)" in
	  redis) ;;
	  etcd) export SEATLOCK_LEASE_STORE_URL="$${ETCD_URL:?STORE=etcd needs ETCD_URL (scripts/services.sh up starts one)}" ;;
	  zookeeper) export SEATLOCK_LEASE_STORE_URL="$${ZK_URL:?STORE=zookeeper needs ZK_URL (scripts/services.sh up starts one)}" ;;
	  cluster) REDIS_URL="$$(scripts/services.sh cluster-up)"; export REDIS_URL ;;
	  *) echo "STORE=$(STORE): use STORE=redis, STORE=etcd, STORE=zookeeper or STORE=cluster" >&2; exit 2 ;;
	esac
	# One secret across restarts (and processes): buyers are signed cookies.
	export SEATLOCK_SECRET="$${SEATLOCK_SECRET:-$$(scripts/services.sh secret)}"
	echo "Leases in $(STORE) ($${SEATLOCK_LEASE_STORE_URL:-$$REDIS_URL}); sessions in Redis."
	$(CARGO) build --release -p $(SERVER) --bin $(SERVER)
	$(RELEASE)/$(SERVER) migrate
	$(RELEASE)/$(SERVER) seed
endef

demo: services
	source .run/env
	trap 'scripts/services.sh down' EXIT
	$(release_server)
	echo "Open http://$${SEATLOCK_BIND:-127.0.0.1:3000} in two browsers and race for a seat. Ctrl-C stops everything."
	$(RELEASE)/$(SERVER) serve

# The demo as seatlock-lab with --enable-race-lab: GET /lab switches one of the article's
# steps off and races three simulated servers for seat 14C, the step off beside every step
# on (docs/race-lab.md#the-lab-in-the-browser). `seatlock-lab migrate` adds the lab's tables.
lab: SERVER = seatlock-lab
lab: services
	source .run/env
	trap 'scripts/services.sh down' EXIT
	$(release_server)
	echo "Open http://$${SEATLOCK_BIND:-127.0.0.1:3000}/lab, pick a step to switch off, and press Run. Ctrl-C stops everything."
	SEATLOCK_ENABLE_RACE_LAB=true $(RELEASE)/seatlock-lab serve

# N server processes behind HAProxy on SEATLOCK_BIND (default 127.0.0.1:3000); the same
# stores and settings as demo. Ctrl-C stops everything (see docs/scale-out.md).
N ?= 3
scale: services
	source .run/env
	trap 'scripts/services.sh down' EXIT
	$(release_server)
	SEATLOCK_BIN="$${SEATLOCK_BIN:-$(RELEASE)/$(SERVER)}" scripts/scale.sh run $(N)

# The double-purchase race, six rows side by side (five strategies, the fenced one without and with cooling), then the group race (see docs/race-lab.md).
# The servers are seatlock-lab's: the unsafe strategies exist only there.
race: services
	source .run/env
	$(CARGO) build --release -p seatlock-lab -p seatlock-harness --bin seatlock-lab --bin load-test
	$(RELEASE)/load-test race --strategy all --json target/race/report.json --html target/race/report.html
	$(RELEASE)/load-test race --strategy groups --json target/race/groups.json

# A Redis failover that loses grants (docs/failover.md): its own primary, replica and
# three Sentinels on free loopback ports, two servers, seats and auction, the failover
# guard off then on (seatlock-lab's --lab-disable-failover-guard); writes
# target/failover/report.json and report.html.
failover: services
	source .run/env
	$(CARGO) build --release -p seatlock-lab -p seatlock-harness --bin seatlock-lab --bin load-test
	$(RELEASE)/load-test failover --json target/failover/report.json --html target/failover/report.html

# Buyers (two tabs each) and bidders on three lock workloads under a fault schedule drawn
# from SEED (default: drawn and printed), NEMESIS_SECONDS long (default 180), the leases
# in STORE (redis under Sentinel, or etcd or zookeeper with three members); every
# operation recorded and checked (docs/nemesis.md); writes target/nemesis/report.json,
# report.html and the histories; fails if a product workload's history is invalid, the
# unfenced one's valid, a fault could not be injected, or nothing interesting happened.
nemesis: services
	source .run/env
	$(CARGO) build --release -p seatlock-lab -p seatlock-harness --bin seatlock-lab --bin load-test
	$(RELEASE)/load-test nemesis --store $(STORE) --json target/nemesis/report.json --html target/nemesis/report.html

# The linearizability checker (docs/nemesis.md#the-linearizability-search) on every one of
# Porcupine's test histories (harness/tests/data/porcupine): the same verdict as
# Porcupine's tests, each history's steps and time in a release build. `make test` checks a
# subset (harness/tests/linearizability.rs).
linearizability:
	$(CARGO) build --release -p seatlock-harness --bin load-test
	$(RELEASE)/load-test porcupine

# The opening minute of an on-sale (docs/performance.md#make-onsale): BUYERS people
# (default 20,000; most look, a share buys with best available, some hang up, some
# retry, a few bots) in a burst against N server(s) behind HAProxy (default 1 here,
# not scale's 3), through the arena's waiting room of SHOPPERS when WAITING_ROOM=on;
# writes target/onsale/report.json and report.html, fails if a seat sold twice or a
# buyer bought over the limit.
onsale: N = 1
WAITING_ROOM ?= off
BUYERS ?= 20000
SHOPPERS ?= 1000
onsale: services
	source .run/env
	case "$(WAITING_ROOM)" in
	  on) room=(--waiting-room-shoppers "$(SHOPPERS)") ;;
	  off) room=() ;;
	  *) echo "WAITING_ROOM=$(WAITING_ROOM): use WAITING_ROOM=on or WAITING_ROOM=off" >&2; exit 2 ;;
	esac
	# Two builds: built with the harness (which uses the lab), seatlock would get `failpoints`.
	$(CARGO) build --release -p seatlock --bin seatlock
	$(CARGO) build --release -p seatlock-harness --bin load-test
	$(RELEASE)/load-test onsale --servers $(N) --buyers $(BUYERS) "$${room[@]}" \
	  --json target/onsale/report.json --html target/onsale/report.html

# Hot paths against their baselines in one run on the same Redis and Postgres, release
# build: writes target/bench/report.json and prints the table (see docs/performance.md).
bench: services
	source .run/env
	$(CARGO) bench --bench hot_paths

# One auction item, WATCHERS pages with its event stream open, 4 bidders stating rising
# maxima for 10 s against one release server (docs/auction.md#watchers); writes
# target/bids/report.json.
WATCHERS ?= 1000
bids: services
	source .run/env
	# Two builds, as for onsale: built with the harness, seatlock would get `failpoints`.
	$(CARGO) build --release -p seatlock --bin seatlock
	$(CARGO) build --release -p seatlock-harness --bin load-test
	mkdir -p target/bids
	$(RELEASE)/load-test bids --watchers $(WATCHERS) --json target/bids/report.json

e2e-driver:
	scripts/e2e-driver.sh

test: services e2e-driver
	source .run/env
	source e2e/driver.env
	$(CARGO) build --workspace --bins # the e2e suite starts target/debug/seatlock and seatlock-lab
	$(CARGO) test --workspace --all-targets
	$(CARGO) test --workspace --doc
	$(CARGO) run -q -p lease --example hold_and_fence
	$(MAKE) lint

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --workspace --no-deps -q # no broken doc links
