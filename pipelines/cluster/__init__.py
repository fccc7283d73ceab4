"""Running beyond one machine: the `cluster:` config section (config), `memagent config check`
(check: resources against the cluster, shared storage, the window budget), and the Serve
application that KubeRay's RayService imports (serve_app). Manifests live in infra/k8s/."""
