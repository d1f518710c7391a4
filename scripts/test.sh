#!/usr/bin/env bash
# Set up (idempotent) and run the whole test suite: lint, types, artifact drift, unit, integration.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PWD/.tools/bin:$PATH"
fixtures="$(python -c 'from tidescale.tools import FIXTURES; print(FIXTURES)')"
if [ ! -d "$fixtures" ]; then
  echo "test.sh: the shared fixtures are not at $fixtures; clone beside ../shared or set TIDESCALE_FIXTURES" >&2
  exit 2
fi
echo "== ruff"; ruff check --quiet .
echo "== mypy"; mypy --no-error-summary tidescale exporters alerts autoscaler dashboards
echo "== generated artifacts"; tidescale generate --check
echo "== unit tests"; pytest -q -m "not integration" "$@"
echo "== integration tests"; pytest -q -m integration "$@"
