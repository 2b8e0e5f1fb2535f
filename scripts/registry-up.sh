#!/usr/bin/env bash
# registry-up.sh starts a real OCI registry for the tests of a kubernetes
# compute's `registry:` (internal/e2e): Debian's docker-registry
# (distribution 2.8), run as `docker-registry serve CONFIG` by this script,
# not by systemd, with filesystem storage under /var/lib/ferry-registry and
# htpasswd logins, listening on 127.0.0.1:5000 only. The test cluster's
# containerd pulls from it over plain HTTP (a loopback registry needs no
# configuration there) and Ferry's server pushes to it. It is idempotent:
# a registry that answers is left alone.
#
#   scripts/registry-up.sh          start it (or see it runs)
#   scripts/registry-up.sh down     stop the one this script started
#
# The package is unpacked with dpkg -x rather than installed: installing
# it would also start a system registry on the same port. Its log is
# /var/lib/ferry-registry/registry.log. The login is fixed test data,
# known to the tests (internal/testutil/registry.go): user ferry,
# password ferry-test-registry.
set -euo pipefail
R=/var/lib/ferry-registry
ADDR=127.0.0.1:5000
say() { echo "registry-up: $*"; }

answers() { curl -s -o /dev/null -w '%{http_code}' "http://$ADDR/v2/" 2>/dev/null | grep -qE '^(200|401)$'; }

if [ "${1:-}" = down ]; then
  if [ -f $R/registry.pid ] && kill -0 "$(cat $R/registry.pid)" 2>/dev/null; then
    kill "$(cat $R/registry.pid)"; say "stopped"
  fi
  rm -f $R/registry.pid
  exit 0
fi

if answers; then
  say "a registry answers at $ADDR already"
  exit 0
fi
mkdir -p $R/data
bin=$R/root/usr/bin/docker-registry
if [ ! -x $bin ]; then
  say "unpacking Debian's docker-registry (dpkg -x)"
  debs=$(mktemp -d)
  (cd "$debs" && apt-get download docker-registry >/dev/null 2>&1) || {
    apt-get update -qq; (cd "$debs" && apt-get download docker-registry >/dev/null); }
  dpkg -x "$debs"/docker-registry_*.deb $R/root
  rm -rf "$debs"
fi
# bcrypt of ferry-test-registry: test data, not a secret.
cat > $R/htpasswd <<'PW'
ferry:$2a$10$AkffsuuyksbqtndAUZn8w.4KvEi.W3tBWD8b0DxxkEo8JyCAAarpq
PW
cat > $R/config.yml <<CFG
version: 0.1
log:
  level: info
storage:
  filesystem:
    rootdirectory: $R/data
  delete:
    enabled: true
http:
  addr: $ADDR
auth:
  htpasswd:
    realm: ferry-tests
    path: $R/htpasswd
CFG
say "starting docker-registry on $ADDR (log $R/registry.log)"
setsid nohup $bin serve $R/config.yml >>$R/registry.log 2>&1 < /dev/null &
echo $! > $R/registry.pid
for _ in $(seq 50); do answers && break; sleep 0.2; done
answers || { tail -20 $R/registry.log >&2; say "the registry did not answer at $ADDR; see $R/registry.log" >&2; exit 1; }
say "up at $ADDR"
