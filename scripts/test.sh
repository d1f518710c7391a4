#!/usr/bin/env bash
# Set up (idempotent) and run the whole test suite: lint, types, artifact drift, unit, integration.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PWD/.tools/bin:$PATH"
echo "== ruff"; ruff check --quiet .
echo "== mypy"; mypy --no-error-summary tidescale exporters alerts autoscaler dashboards
echo "== generated artifacts"; tidescale generate --check
echo "== unit tests"; pytest -q -m "not integration" "$@"
echo "== integration tests"; pytest -q -m integration "$@"
