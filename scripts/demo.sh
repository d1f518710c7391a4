#!/usr/bin/env bash
# Set up (idempotent) and run the demo on its embedded defaults; results land in ./demo-out.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/tidescale demo --out demo-out "$@"
