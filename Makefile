# Two commands do all set-up on a fresh machine (see README):
#   make quickstart   the main job on embedded defaults
#   make test         the test suite (starts its own SeaweedFS / MLflow servers)
.PHONY: setup quickstart test unit bench-quick

setup:
	bash infra/setup.sh

quickstart: setup
	.venv/bin/memagent quickstart

test: setup
	.venv/bin/python -m pytest -q --durations=30 tests

unit: setup
	.venv/bin/python -m pytest -q tests/unit
