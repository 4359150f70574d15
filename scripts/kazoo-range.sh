#!/usr/bin/env bash
# Runs the contract with kazoo's private surface (tests/unit/test_kazoo_private.py) and a short real-ZooKeeper
# subset of the modules that use it against each kazoo version given (make kazoo-range: the lowest and the
# highest that pyproject.toml allows). Each version gets a throwaway virtualenv: kazoo at that version, pytest
# and pytest-timeout at constraints.txt's versions, the package editable without its dependencies (so a
# version outside the range can be tried before the range is widened). The ZooKeeper jars: make zookeeper.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-python3}"
(( $# > 0 )) || { echo "usage: $0 KAZOO_VERSION..." >&2; exit 2; }

# kazoo_private's contract and the buffered reads, then the modules that go through kazoo_private: ephemerals
# (getEphemerals), claims and setwatches (a batch's watches; a deleted claim noticed by its owner, worker
# processes; the watches set again after a reconnection), session and lease (the negotiated timeout inside the
# handshake, the lease ended once when cut off)
TESTS=(
  tests/unit/test_kazoo_private.py
  tests/unit/test_bufferedreads.py
  tests/unit/test_batchedsends.py
  tests/unit/test_claimtxn.py
  tests/integration/test_send_all.py
  tests/integration/test_ephemerals.py
  tests/integration/test_claim_waits.py
  tests/integration/test_claim_deleted.py
  tests/integration/test_lease_prober.py
  tests/integration/test_reconnect_recheck.py
)

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
grep -v '^kazoo==' constraints.txt > "$work/constraints.txt"
pip_install() { "$1/bin/pip" install -q --disable-pip-version-check "${@:2}"; }

for version in "$@"; do
  venv="$work/kazoo-$version"
  start=$SECONDS
  "$PY" -m venv "$venv"
  pip_install "$venv" --no-deps -e .
  pip_install "$venv" -c "$work/constraints.txt" "kazoo==$version" pytest pytest-timeout
  installed="$("$venv/bin/python" -c 'import kazoo.version; print(kazoo.version.__version__)')"
  [[ "$installed" == "$version" ]] || { echo "kazoo-range: asked for kazoo $version, got $installed" >&2; exit 1; }
  echo "kazoo-range: kazoo $version"
  "$venv/bin/pytest" -q -p no:cacheprovider "${TESTS[@]}"
  echo "kazoo-range: kazoo $version passed in $(( SECONDS - start )) s"
done
