#!/usr/bin/env bash
# Set up (idempotent) and run the whole test suite: lint, types, artifact drift, unit, integration, e2e.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build-cluster.sh thanos  # the many-clusters tests' query layer; the demo does not need it
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
echo "== unit tests"; pytest -q -m "not integration and not e2e" "$@"
echo "== integration tests"; pytest -q -m integration --durations=15 "$@"
echo "== e2e tests (the local Kubernetes cluster)"; pytest -q -m e2e --durations=25 tests/e2e "$@"
