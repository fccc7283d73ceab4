"""`memagent config check`: validate a config without starting anything (no Ray, no engine,
no model download), so a cluster run fails here in a second rather than on the cluster.

    memagent --config cluster-qwen2.5-7b config check
    memagent --config cluster-qwen2.5-7b config check --json rollout.workers=32
    memagent config show                 # every setting in effect, defaults included, as YAML

Checked: unknown keys and bad values (as every command loads its config: one line naming
the key); the rollout workers and the learner against the `cluster:` section; shared storage
on more than one node; the window budget (pipelines/cluster/window.py). Exit status 0 with a
short summary; else one line per problem on stdout (as a linter reports) and exit status 2
with the count on stderr. --json prints one JSON object either way.
"""

from __future__ import annotations

import json

from pipelines.cluster.resources import placements, pool_of, resource_problems, storage_problems
from pipelines.cluster.window import window_budget
from pipelines.config import DEFAULT_CONFIG, Config
from pipelines.errors import UserError


def add_arguments(p) -> list:
    sub = p.add_subparsers(dest="config_command", required=True)
    check = sub.add_parser("check", help="validate the config: keys, resources against cluster:, window budget")
    check.add_argument("--json", action="store_true", help="print the result as one JSON object")
    show = sub.add_parser("show", help="print every setting in effect (defaults included) as YAML")
    return [check, show]


def check(cfg: Config) -> dict:
    places = placements(cfg)
    problems = resource_problems(cfg, places) + storage_problems(cfg)
    try:
        budget = window_budget(cfg)
    except UserError as e:  # e.g. a template set with no measured count: the other problems still show
        budget = None
        problems.append(str(e))
    if budget is not None and not budget.fits:
        problems.append(budget.line())
    c = cfg.cluster
    return {"ok": not problems, "problems": problems,
            "summary": [p.line() for p in places] + ([budget.line()] if budget else []),
            "cluster": {"nodes": c.nodes, "gpus_per_node": c.gpus_per_node, "cpus_per_node": pool_of(cfg, None).cpus,
                        "groups": {k: g.model_dump() for k, g in c.groups.items()}},
            "placements": [p.summary() for p in places],
            "window": budget.summary() if budget else None}


def run(cfg: Config, args) -> None:
    from pipelines.track.redact import env_secrets, redact

    source = args.config or str(DEFAULT_CONFIG)
    if args.config_command == "show":
        import yaml

        print(redact(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False), env_secrets()), end="")
        return
    result = {"config": source, **check(cfg)}
    secrets = env_secrets()
    if args.json:
        print(redact(json.dumps(result), secrets))
    elif result["ok"]:
        print(f"config '{source}': OK")
        print("\n".join(result["summary"]))
    else:
        print("\n".join(redact(problem, secrets) for problem in result["problems"]))
    if not result["ok"]:
        n = len(result["problems"])
        raise UserError(f"config '{source}': {n} problem{'s' if n > 1 else ''}")
