#!/usr/bin/env bash
# Bring up the kind development environment with a sample sandbox (make dev).
#
#   hack/dev-up.sh            # create or reuse the kind cluster, build, load, apply, wait
#   KIND_CLUSTER=foo hack/dev-up.sh
#   KIND_NODE_IMAGE=kindest/node:v1.32.2 hack/dev-up.sh   # Kubernetes 1.30+ is needed
#   hack/dev-up.sh down       # delete the cluster
#
# Needs docker (a running engine), kind and kubectl. Re-running it rebuilds the images and
# restarts the operator and the stand-in API, so it is also the "deploy my change" command.
set -euo pipefail
cd "$(dirname "$0")/.."

CLUSTER="${KIND_CLUSTER:-craft-dev}"
CONTEXT="kind-${CLUSTER}"
OPERATOR_IMAGE=craft-operator:dev
SANDBOX_IMAGE=craft-sandbox:dev
SYSTEM=craft-system
SANDBOXES=craft-sandboxes

die() { echo "dev-up: $*" >&2; exit 1; }
step() { echo "==> $*"; }
k() { kubectl --context "$CONTEXT" "$@"; }

for tool in docker kind kubectl; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool is not installed"
done
docker info >/dev/null 2>&1 || die "no Docker engine here (docker info failed)"

if [[ "${1:-up}" == "down" ]]; then
    kind delete cluster --name "$CLUSTER"
    exit 0
fi

if kind get clusters | grep -qx "$CLUSTER"; then
    step "reusing kind cluster $CLUSTER"
else
    step "creating kind cluster $CLUSTER"
    kind create cluster --name "$CLUSTER" --wait 180s ${KIND_NODE_IMAGE:+--image "$KIND_NODE_IMAGE"}
fi

step "building $OPERATOR_IMAGE and $SANDBOX_IMAGE"
DOCKER_BUILDKIT=1 docker build -f operator/Dockerfile -t "$OPERATOR_IMAGE" .
DOCKER_BUILDKIT=1 docker build -t "$SANDBOX_IMAGE" sandbox-image
kind load docker-image "$OPERATOR_IMAGE" "$SANDBOX_IMAGE" --name "$CLUSTER"

step "applying manifests/overlays/dev"
# The CRDs first: one apply cannot create an object of a CRD it creates (the peering object).
k apply -k crds
k wait --for=condition=Established --timeout=60s crd/clusterkopfpeerings.kopf.dev \
    crd/craftsandboxes.craft.onyx.app crd/craftsandboxpools.craft.onyx.app \
    crd/craftsandboxpolicies.craft.onyx.app
k apply -k manifests/overlays/dev
k -n "$SYSTEM" rollout restart statefulset/craft-operator deployment/onyx-api
for workload in deployment/postgres deployment/minio deployment/onyx-api statefulset/craft-operator; do
    k -n "$SYSTEM" rollout status "$workload" --timeout=300s \
        || die "$workload is not available; see: kubectl --context $CONTEXT -n $SYSTEM describe $workload"
done
k -n "$SYSTEM" wait --for=condition=Complete job/craft-dev-bucket --timeout=300s \
    || die "the bucket Job did not complete; see: kubectl --context $CONTEXT -n $SYSTEM logs job/craft-dev-bucket"

step "creating the sample sandbox"
k apply -f manifests/overlays/dev/sample-sandbox.yaml
k -n "$SANDBOXES" wait --for=jsonpath='{.status.phase}'=Ready csb/alice --timeout=300s \
    || die "sandbox alice is not Ready; see: kubectl --context $CONTEXT -n $SANDBOXES describe csb alice"

cat <<DONE

The development environment is up (context $CONTEXT).
  kubectl --context $CONTEXT -n $SANDBOXES get csb
  kubectl --context $CONTEXT -n $SANDBOXES exec alice -- onyx-cli validate-config
  kubectl --context $CONTEXT -n $SYSTEM logs craft-operator-0 -f
Put a file into the user library and sync it:
  printf 'hello\n' | kubectl --context $CONTEXT -n $SYSTEM exec -i craft-operator-0 -- \\
    python -c 'import os,sys,boto3; boto3.client("s3", endpoint_url=os.environ["CRAFT_S3_ENDPOINT_URL"]).put_object(Bucket=os.environ["CRAFT_S3_BUCKET"], Key=sys.argv[1], Body=sys.stdin.buffer.read())' \\
    public/knowledge/3f2b8c1e-9d4a-4e6b-8f0a-1c2d3e4f5a6b/user_library/hello.txt
  kubectl --context $CONTEXT -n $SANDBOXES annotate csb alice craft.onyx.app/user-library-revision=\$(date +%s) --overwrite
  kubectl --context $CONTEXT -n $SANDBOXES exec alice -- ls -R /workspace/user_library
Tear down: make dev-down
DONE
