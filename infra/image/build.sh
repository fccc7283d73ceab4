#!/usr/bin/env bash
# `make image` (GPU, what infra/k8s/ runs) and `make image-cpu`: build infra/image/Dockerfile.FLAVOUR
# with the first OCI builder that works here (docker, podman, buildah), and print the tag.
#   bash infra/image/build.sh gpu|cpu [BUILDER ARGS...]    e.g. --build-arg BASE=...
# The context is staged: only pyproject.toml, README.md, pipelines/, configs/ and infra/ (not .venv/).
set -euo pipefail
cd "$(dirname "$0")/../.."
FLAVOUR=${1:-gpu}
shift || true
[[ "$FLAVOUR" == cpu || "$FLAVOUR" == gpu ]] || { echo "make image: flavour '$FLAVOUR': expected cpu or gpu" >&2; exit 2; }
VERSION=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' pipelines/__init__.py)
TAG="memagent:$VERSION"
[[ "$FLAVOUR" == gpu ]] || TAG="$TAG-$FLAVOUR"

works() {  # a client alone is not a builder: docker needs its daemon
    case "$1" in
        docker) docker info >/dev/null 2>&1 ;;
        *) "$1" info >/dev/null 2>&1 ;;
    esac
}
BUILDER=""
for b in docker podman buildah; do
    if command -v "$b" >/dev/null && works "$b"; then BUILDER=$b; break; fi
done
if [[ -z "$BUILDER" ]]; then
    echo "make image: no OCI builder works here (looked for docker with its daemon, podman, buildah); install one, or build infra/image/Dockerfile.$FLAVOUR elsewhere" >&2
    exit 2
fi

CONTEXT=$(mktemp -d)
trap 'rm -rf "$CONTEXT"' EXIT
tar --exclude=__pycache__ -cf - pyproject.toml README.md pipelines configs infra | tar -xf - -C "$CONTEXT"
"$BUILDER" build -f "infra/image/Dockerfile.$FLAVOUR" -t "$TAG" "$@" "$CONTEXT" >&2
echo "$TAG"
