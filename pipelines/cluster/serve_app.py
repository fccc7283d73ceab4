"""The Serve application as KubeRay's RayService deploys it (infra/k8s/rayservice.yaml).

A RayService does not run `memagent serve`: its operator hands the cluster a Serve config
whose `import_path` names an application builder, and redeploys when that config changes.
This is the builder; it builds what `memagent serve` builds, from the same config file:

    applications:
      - name: memagent
        import_path: pipelines.cluster.serve_app:app
        args: {config: /etc/memagent/config.yaml, model: "models:/memagent@production"}

Serve's proxy listens on 0.0.0.0 in a pod, so the bearer token (env serve.token_env, from
a Secret) is required here as `memagent serve --host 0.0.0.0` requires it.
"""

from __future__ import annotations

import os

from pydantic import Field, ValidationError

from pipelines.errors import UserError
from pipelines.typed import Strict


class AppArgs(Strict):
    config: str  # the config file, as --config
    model: str | None = None  # as --model; None: model.path
    overrides: list[str] = Field(default_factory=list)  # key=value, as on the command line


def app(args: dict):
    from pipelines.config import load_config
    from pipelines.serve.app import build_app
    from pipelines.serve.settings import check_binding, token_of

    try:
        a = AppArgs.model_validate(args)
    except ValidationError as e:
        err = e.errors()[0]
        raise UserError(f"serve app args: '{'.'.join(str(p) for p in err['loc'])}': {err['msg']}") from None
    cfg = load_config(a.config, a.overrides)
    if cfg.s3.endpoint_url:
        os.environ["AWS_ENDPOINT_URL"] = cfg.s3.endpoint_url
    check_binding("0.0.0.0", token_of(cfg), cfg.serve.token_env)
    return build_app(cfg, a.model)
