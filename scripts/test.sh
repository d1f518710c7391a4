#!/usr/bin/env bash
# Set up (idempotent) and run the whole test suite: lint, types, artifact drift, unit, integration, e2e.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --without-cluster

# The Go builds (about 40 minutes of both cores on a cold machine, nothing once built) run in the
# background, niced, beside what needs none of them: the checks, the unit and the integration tests,
# which leave CPU idle. In order: the local cluster's core components; KEDA and prometheus-adapter,
# which the e2e tests start without (the tests marked as needing neither run first; the others wait
# for TIDESCALE_KEDA_BUILD, then TIDESCALE_ADDONS_BUILD: prometheus-adapter and the registry, which
# only the chart's OCI publishing needs); then Thanos, which only the many-clusters e2e module, the last, waits
# for (TIDESCALE_THANOS_BUILD), and the Thanos integration tests, run after the e2e tests. The e2e
# tests leave most of the CPU idle.
mkdir -p .tools
builds=.tools/.builds
rm -f "$builds".cluster "$builds".keda "$builds".addons "$builds".thanos
# Its own process group (job control), to be stopped whole, but not its own session: the kernel's
# autogroups schedule each session apart, which would undo the nice.
set -m
nice -n 19 bash -c 'bash scripts/build-cluster.sh --without keda prometheus-adapter registry; echo $? > "$1".cluster
  [ "$(cat "$1".cluster)" = 0 ] && bash scripts/build-cluster.sh keda; echo $? > "$1".keda
  [ "$(cat "$1".keda)" = 0 ] && bash scripts/build-cluster.sh prometheus-adapter registry; echo $? > "$1".addons
  [ "$(cat "$1".addons)" = 0 ] && bash scripts/build-cluster.sh thanos; echo $? > "$1".thanos' _ "$builds" </dev/null &
builder=$!
set +m
trap 'kill -- -"$builder" 2>/dev/null || true' EXIT
wait_for_build() {  # $1: cluster | keda | addons | thanos
  while [ ! -s "$builds.$1" ]; do
    kill -0 "$builder" 2>/dev/null || [ -s "$builds.$1" ] || { echo "[setup] the Go builds stopped" >&2; exit 1; }
    sleep 2
  done
  [ "$(cat "$builds.$1")" = 0 ] || { echo "[setup] the Go builds failed (above)" >&2; exit 1; }
}

export PATH="$PWD/.venv/bin:$PWD/.tools/bin:$PATH"
echo "== ruff"; ruff check --quiet .
echo "== mypy"
# mypy cannot follow setuptools' package-dir mapping, so it checks a tree of links laid out as installed.
rm -rf .typecheck && mkdir -p .typecheck/tidescale
for entry in tidescale/*; do ln -s "../../$entry" .typecheck/tidescale/; done
product=$(python -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["tool"]["tidescale"]["layout"]["product"])')
for folder in $product; do ln -s "../../$folder" ".typecheck/tidescale/$folder"; done
(cd .typecheck && mypy --config-file ../pyproject.toml --no-error-summary -p tidescale)
echo "== generated artifacts"; tidescale generate --check
echo "== unit tests"; pytest -q -n 2 -m "not integration and not e2e" "$@"  # on both cores (pytest-xdist)
thanos_tests=tests/integration/test_thanos_query.py
echo "== integration tests"; pytest -q -m integration --durations=15 --ignore="$thanos_tests" "$@"
wait_for_build cluster
echo "== e2e tests (the local Kubernetes cluster)"
TIDESCALE_KEDA_BUILD="$PWD/$builds.keda" TIDESCALE_ADDONS_BUILD="$PWD/$builds.addons" \
  TIDESCALE_THANOS_BUILD="$PWD/$builds.thanos" \
  pytest -q -m e2e --durations=25 tests/e2e "$@"
wait_for_build thanos
echo "== integration tests behind a real Thanos Query"; pytest -q -m integration "$thanos_tests" "$@"
