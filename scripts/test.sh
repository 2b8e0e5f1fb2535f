#!/usr/bin/env bash
# test.sh is the README's test command: it sets up what the tests need
# (scripts/test-setup.sh), runs every test once, and ends with how many tests
# ran, were skipped and failed, and which were skipped and why.
#
#   bash scripts/test.sh [go test flags and packages]   (default: ./...)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/test-setup.sh
[ $# -gt 0 ] || set -- ./...
# gotestsum (a go tool of this module) runs `go test -json` and prints one
# line a package, the output of what failed, the skipped tests with their
# reasons, and a DONE line with the counts. The end-to-end package runs
# real servers, clusters, Slurm and browsers one test after another and
# takes longer than go test's default 10-minute limit on a 2-core machine:
# 40 minutes is its limit here (a -timeout given after it wins).
exec go tool gotestsum --format pkgname-and-test-fails --format-hide-empty-pkg -- -count=1 -timeout=40m "$@"
