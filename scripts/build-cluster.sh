#!/usr/bin/env bash
# Build the local cluster's upstream components (idempotent), and the extras named on the command
# line: each Go module under deploy/cluster/go pins one component; its binaries land in .tools/bin.
# A component is rebuilt only when its go.mod, go.sum or the Go version changed. One progress line
# per component that builds; silent otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BIN=$ROOT/.tools/bin
say() { printf '[setup] %s\n' "$*" >&2; }

command -v go >/dev/null || { say "Go >= 1.26 is required to build the local cluster (https://go.dev/doc/install; the Go module proxy must be reachable)"; exit 1; }
gover=$(go env GOVERSION)
case "$gover" in go1.2[6-9]*|go1.[3-9]*) ;; *) say "Go >= 1.26 is required to build the local cluster, found $gover"; exit 1 ;; esac
mkdir -p "$BIN"

# component | module | output=package ... ; the Kubernetes version also goes into --version.
# the version a module requires, from its go.mod (single-line or block form)
required() { awk -v m="$2" '($1=="require" && $2==m) {print $3} ($1==m && $2 ~ /^v/) {print $2}' "$1/go.mod" | head -1; }
K8S_VERSION=$(required deploy/cluster/go/kubernetes k8s.io/kubernetes)
K8S_MINOR=$(echo "$K8S_VERSION" | cut -d. -f2)
K8S_LDFLAGS="-X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$K8S_MINOR -X k8s.io/component-base/version.gitTreeState=clean"
components=(
  "etcd|go.etcd.io/etcd/server/v3|etcd=go.etcd.io/etcd/server/v3"
  "kubernetes|k8s.io/kubernetes|kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager kube-scheduler=k8s.io/kubernetes/cmd/kube-scheduler kube-proxy=k8s.io/kubernetes/cmd/kube-proxy"
  "coredns|github.com/coredns/coredns|coredns=github.com/coredns/coredns"
  "prometheus-operator|github.com/prometheus-operator/prometheus-operator|prometheus-operator=github.com/prometheus-operator/prometheus-operator/cmd/operator prometheus-config-reloader=github.com/prometheus-operator/prometheus-operator/cmd/prometheus-config-reloader"
  "prometheus|github.com/prometheus/prometheus|prometheus-v3=github.com/prometheus/prometheus/cmd/prometheus"
  "kube-state-metrics|k8s.io/kube-state-metrics/v2|kube-state-metrics=k8s.io/kube-state-metrics/v2"
  "kube-router|github.com/cloudnativelabs/kube-router/v2|kube-router=github.com/cloudnativelabs/kube-router/v2/cmd/kube-router"
  "registry|github.com/distribution/distribution/v3|registry=github.com/distribution/distribution/v3/cmd/registry"
  "prometheus-adapter|sigs.k8s.io/prometheus-adapter|prometheus-adapter=sigs.k8s.io/prometheus-adapter/cmd/adapter"
  "keda|github.com/kedacore/keda/v2|keda=github.com/kedacore/keda/v2/cmd/operator keda-adapter=github.com/kedacore/keda/v2/cmd/adapter keda-admission-webhooks=github.com/kedacore/keda/v2/cmd/webhooks"
)
# Built only when named (`build-cluster.sh thanos`): what the tests need beside the cluster, not the demo.
extra=(
  "thanos|github.com/thanos-io/thanos|thanos=github.com/thanos-io/thanos/cmd/thanos"
)
# optional: `build-cluster.sh COMPONENT...` builds just those; `--without COMPONENT...` all the
# cluster's but those (the test command builds KEDA and prometheus-adapter apart, beside the e2e
# tests that need neither)
only=() without=()
if [ "${1:-}" = "--without" ]; then shift; without=("$@"); else only=("$@"); fi
[ ${#only[@]} -gt 0 ] && components+=("${extra[@]}")

for entry in "${components[@]}"; do
  IFS='|' read -r comp module targets <<<"$entry"
  if [ ${#only[@]} -gt 0 ] && [[ ! " ${only[*]} " =~ " $comp " ]]; then continue; fi
  if [ ${#without[@]} -gt 0 ] && [[ " ${without[*]} " =~ " $comp " ]]; then continue; fi
  mod=deploy/cluster/go/$comp
  version=$(required "$mod" "$module")
  ldflags="-s -w"; [ "$comp" = kubernetes ] && ldflags="$ldflags $K8S_LDFLAGS"
  # kube-router's --version and its kube_router_build_info metric read the version its Makefile injects.
  [ "$comp" = kube-router ] && ldflags="$ldflags -X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=$version"
  # Thanos is released with Prometheus' slice-backed labels (.promu.yml): its Store API casts them in place.
  tags=""
  [ "$comp" = thanos ] && { tags="netgo,slicelabels"; ldflags="$ldflags -X github.com/prometheus/common/version.Version=${version#v}"; }
  want=$(cat "$mod/go.mod" "$mod/go.sum" <(echo "$gover $ldflags${tags:+ $tags}") | sha256sum | cut -d' ' -f1)
  stamp=$BIN/.$comp.stamp
  stale=0
  [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] || stale=1
  for t in $targets; do [ -x "$BIN/${t%%=*}" ] || stale=1; done
  [ $stale -eq 1 ] || continue
  names=$(for t in $targets; do printf '%s ' "${t%%=*}"; done)
  say "building $comp $version (${names% }) ..."
  start=$(date +%s)
  for t in $targets; do
    out=${t%%=*}; pkg=${t#*=}
    if ! (cd "$mod" && GOFLAGS=-mod=readonly go build -trimpath -tags "$tags" -ldflags "$ldflags" -o "$BIN/$out.tmp" "$pkg") >"$BIN/.$comp.log" 2>&1; then
      tail -20 "$BIN/.$comp.log" >&2; say "building $comp failed (log: $BIN/.$comp.log)"; exit 1
    fi
    mv "$BIN/$out.tmp" "$BIN/$out"
  done
  echo "$want" > "$stamp"
  say "built $comp in $(( $(date +%s) - start )) s"
done
