#!/usr/bin/env bash
# deploy/kubernetes/s3flash-csi.yaml: the Helm chart rendered with its default values
# (scripts/render-chart.py; tests/python/test_csi_deploy.py checks that the two agree).
set -euo pipefail
cd "$(dirname "$0")/.."
{
    echo "# The s3flash CSI driver for kubectl apply -f (docs/KUBERNETES.md): the Helm chart"
    echo "# deploy/helm/s3flash-csi rendered with its default values into kube-system."
    echo "# Made by scripts/csi-manifests.sh; edit the chart, not this file."
    python3 scripts/render-chart.py --namespace kube-system
} > deploy/kubernetes/s3flash-csi.yaml
