# Two commands do all set-up on a fresh machine (see README):
#   make quickstart   the main job on embedded defaults
#   make test         the test suite (starts its own SeaweedFS / MLflow servers)
.PHONY: setup quickstart test unit image image-cpu

setup:
	bash infra/setup.sh

quickstart: setup
	.venv/bin/memagent quickstart

test: setup
	.venv/bin/python -m pytest -q --durations=60 tests

unit: setup  # the tests not marked slow (no vLLM engine, training run, cluster or chaos fault)
	.venv/bin/python -m pytest -q -m "not slow" tests

# The images (infra/image/): `make image` is the GPU one infra/k8s/ runs, `make image-cpu` the
# CPU one; each prints its tag. IMAGE_ARGS go to the builder (e.g. --build-arg BASE=...).
image:
	bash infra/image/build.sh gpu $(IMAGE_ARGS)

image-cpu:
	bash infra/image/build.sh cpu $(IMAGE_ARGS)
