#!/usr/bin/env bash
# Everything the browser tests (e2e/) need besides the Rust crates, without downloading any
# browser or Node binary:
#   - Debian's chromium at /usr/bin/chromium (apt, as root, when missing);
#   - a Playwright driver for playwright-core $PLAYWRIGHT_VERSION (the version playwright-rs
#     pins) in e2e/driver: `node` -> the system node, `package/` = playwright-core from npm;
#   - axe-core $AXE_VERSION from npm (the accessibility engine the e2e suite injects into
#     pages), in e2e/driver-npm beside playwright-core;
#   - e2e/driver.env, to `source` before `cargo test` (PLAYWRIGHT_DRIVER_PATH, E2E_AXE and friends).
#
# Idempotent; when everything is in place it only checks and rewrites driver.env (~10 ms).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
E2E="$ROOT/e2e"
PLAYWRIGHT_VERSION=1.64.0 # keep in step with playwright-rs (0.20.1 pins Playwright 1.64.0)
AXE_VERSION=4.14.1 # the latest release when the e2e suite began using it; pinned so a run is repeatable
CHROMIUM="${E2E_CHROMIUM:-/usr/bin/chromium}"
DRIVER="$E2E/driver"
NPM_DIR="$E2E/driver-npm"
ENV_FILE="$E2E/driver.env"

log() { echo "e2e-driver: $*" >&2; }

apt_install() { # apt_install PACKAGE...
  if [ "$(id -u)" != 0 ]; then
    log "missing $*: run  sudo apt-get install -y $*"; exit 1
  fi
  log "installing $* (apt) ..."
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# 1. The browser.
if [ ! -x "$CHROMIUM" ]; then
  [ "$CHROMIUM" = /usr/bin/chromium ] || { log "E2E_CHROMIUM=$CHROMIUM is not executable"; exit 1; }
  apt_install chromium
fi

# 2. Node (the driver's runtime; npm only for the first install).
NODE="$(command -v node || true)"
[ -n "$NODE" ] || { apt_install nodejs npm; NODE="$(command -v node)"; }
NODE="$(readlink -f "$NODE")"

driver_ok() {
  [ -x "$DRIVER/node" ] && [ -f "$DRIVER/package/cli.js" ] &&
    grep -q "\"version\": \"$PLAYWRIGHT_VERSION\"" "$DRIVER/package/package.json" 2>/dev/null
}

# 3. The driver, assembled under a lock (two `make test` at once share this folder).
if ! driver_ok; then
  exec 9>"$E2E/.driver.lock"
  flock 9
  if ! driver_ok; then
    core="$NPM_DIR/node_modules/playwright-core"
    if ! grep -q "\"version\": \"$PLAYWRIGHT_VERSION\"" "$core/package.json" 2>/dev/null; then
      command -v npm >/dev/null || apt_install npm
      log "npm install playwright-core@$PLAYWRIGHT_VERSION (no browsers) ..."
      mkdir -p "$NPM_DIR"
      PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm install --prefix "$NPM_DIR" --no-audit --no-fund \
        --no-package-lock --loglevel=error "playwright-core@$PLAYWRIGHT_VERSION" >/dev/null
    fi
    tmp="$(mktemp -d "$E2E/.driver.XXXXXX")"
    chmod 755 "$tmp"
    cp -a "$core" "$tmp/package"
    ln -s "$NODE" "$tmp/node"
    rm -rf "$DRIVER"
    mv "$tmp" "$DRIVER"
    driver_ok || { log "driver assembled in $DRIVER but incomplete"; exit 1; }
    log "driver ready: $DRIVER (playwright-core $PLAYWRIGHT_VERSION, node $("$NODE" --version))"
  fi
  exec 9>&-
fi

# 4. axe-core, under the same lock (its one file, axe.min.js, is read by the e2e suite).
AXE="$NPM_DIR/node_modules/axe-core/axe.min.js"
axe_ok() { grep -q "\"version\": \"$AXE_VERSION\"" "$NPM_DIR/node_modules/axe-core/package.json" 2>/dev/null && [ -f "$AXE" ]; }
if ! axe_ok; then
  exec 9>"$E2E/.driver.lock"
  flock 9
  if ! axe_ok; then
    command -v npm >/dev/null || apt_install npm
    log "npm install axe-core@$AXE_VERSION ..."
    mkdir -p "$NPM_DIR"
    # Both packages named: npm prunes what the command line does not name (no lock file here).
    PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm install --prefix "$NPM_DIR" --no-audit --no-fund \
      --no-package-lock --loglevel=error "playwright-core@$PLAYWRIGHT_VERSION" "axe-core@$AXE_VERSION" >/dev/null
    axe_ok || { log "axe-core $AXE_VERSION not installed in $NPM_DIR"; exit 1; }
    log "axe-core ready: $AXE"
  fi
  exec 9>&-
fi

# 5. The environment for cargo test.
env_text="$(printf '%s\n' \
  "# written by scripts/e2e-driver.sh: source it before cargo test" \
  "export PLAYWRIGHT_DRIVER_PATH=$(printf %q "$DRIVER")" \
  "export PLAYWRIGHT_SKIP_DRIVER_DOWNLOAD=1" \
  "export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1" \
  "export E2E_CHROMIUM=$(printf %q "$CHROMIUM")" \
  "export E2E_AXE=$(printf %q "$AXE")")"
if [ "$(cat "$ENV_FILE" 2>/dev/null)" != "$env_text" ]; then
  printf '%s\n' "$env_text" >"$ENV_FILE.tmp"
  mv "$ENV_FILE.tmp" "$ENV_FILE"
fi
