# seatlock: two commands.
#   make demo   private Redis + Postgres, migrate, seed, serve at http://127.0.0.1:3000
#               (STORE=etcd: the leases in a private one-member etcd instead of Redis)
#   make test   the same services, every test (unit, integration, end-to-end), fmt, clippy, rustdoc
#   make race   load-test race: which purchase strategies sell a seat twice
#   make bench  the hot paths side by side with redis-benchmark, rslock, raw SET NX, pgbench
SHELL := /bin/bash
.ONESHELL:
.SHELLFLAGS := -eu -o pipefail -c
export PLAYWRIGHT_SKIP_DRIVER_DOWNLOAD := 1
CARGO ?= cargo
# The lease store of `make demo`: redis (default) or etcd.
STORE ?= redis

.PHONY: demo test race bench services stop e2e-driver lint

services:
	scripts/services.sh up >/dev/null

stop:
	scripts/services.sh down

demo: services
	source .run/env
	trap 'scripts/services.sh down' EXIT
	case "$(STORE)" in
	  redis) ;;
	  etcd) export SEATLOCK_LEASE_STORE_URL="$${ETCD_URL:?STORE=etcd needs ETCD_URL (scripts/services.sh up starts one)}" ;;
	  *) echo "STORE=$(STORE): use STORE=redis or STORE=etcd" >&2; exit 2 ;;
	esac
	echo "Leases in $(STORE) ($${SEATLOCK_LEASE_STORE_URL:-$$REDIS_URL}); sessions in Redis."
	$(CARGO) build --release --bin seatlock
	./target/release/seatlock migrate
	./target/release/seatlock seed
	echo "Open http://$${SEATLOCK_BIND:-127.0.0.1:3000} in two browsers and race for a seat. Ctrl-C stops everything."
	./target/release/seatlock serve

# The double-purchase race, four strategies side by side (see README "Race lab").
race: services
	source .run/env
	$(CARGO) build --release -p seatlock -p seatlock-harness --bin seatlock --bin load-test
	./target/release/load-test race --strategy all --json target/race/report.json --html target/race/report.html

# Hot paths against their baselines in one run on the same Redis and Postgres, release
# build: writes target/bench/report.json and prints the table (see README "Performance").
bench: services
	source .run/env
	$(CARGO) bench --bench hot_paths

e2e-driver:
	scripts/e2e-driver.sh

test: services e2e-driver
	source .run/env
	source e2e/driver.env
	$(CARGO) build --workspace --bins # the e2e suite starts target/debug/seatlock
	$(CARGO) test --workspace --all-targets
	$(CARGO) test --workspace --doc
	$(CARGO) run -q -p lease --example hold_and_fence
	$(MAKE) lint

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --workspace --no-deps -q # no broken doc links
