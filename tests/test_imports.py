"""The house: every module of pipelines/ imports in a fresh interpreter, no cycle in the import
graph (of modules, and of packages other than through the config composition root), no import
of a module that is gone, one loop driver, one place that starts Ray, one atomic rename; the
shared contracts (pipelines/data/) know no stage, no stage reaches into the ingest stage but for
its task builders, and every command lives in its package's command.py.

Imports count wherever they are in a file (a lazy import inside a function still ties its
module to the other one), so a cycle cannot hide behind a function-level import.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "pipelines"


def module_names() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imported(modules: dict[str, Path], name: str) -> Iterator[tuple[int, str]]:
    """(line, module) for each pipelines module that `name` imports, anywhere in the file.
    `from pkg import x` names the submodule pkg.x when there is one, else pkg itself."""
    path = modules[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "pipelines")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            if base.split(".")[0] != "pipelines":
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                yield node.lineno, sub if sub in modules else base


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the pipelines modules it imports."""
    return {name: {m for _, m in imported(modules, name) if m in modules and m != name} for name in modules}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (as a path a -> b -> ... -> a) per strongly connected component of size > 1."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(v: str) -> None:  # Tarjan; the graph is small enough for recursion
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_path_within(graph, c) for c in components]


def _path_within(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:  # breadth-first: the shortest way back to start
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & component):
                if w == start:
                    return paths[v] + [start]
                if w not in paths:
                    paths[w] = paths[v] + [w]
                    nxt.append(w)
        frontier = nxt
    return sorted(component)


def test_graph_helpers_find_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_between_modules():
    found = cycles(import_graph(module_names()))
    assert not found, "import cycles in pipelines/:\n" + "\n".join(" -> ".join(c) for c in found)


def package_of(module: str) -> str:
    """pipelines.rollout.pool -> pipelines.rollout; a top-level module (pipelines.storage) is its own."""
    return ".".join(module.split(".")[:2])


def package_graph(graph: dict[str, set[str]], root: str = "pipelines.config") -> dict[str, set[str]]:
    """package -> the packages its modules import, without `root` (which imports every section's
    config, each of which may import Config back for its type)."""
    out: dict[str, set[str]] = {}
    for module, deps in graph.items():
        p = package_of(module)
        if p != root:
            out.setdefault(p, set()).update(q for q in map(package_of, deps) if q not in (p, root))
    return out


def test_graph_helpers_find_a_package_cycle_but_not_one_through_the_root():
    graph = {"pipelines.a.x": {"pipelines.b.y"}, "pipelines.b.y": {"pipelines.config"},
             "pipelines.config": {"pipelines.a.z"}, "pipelines.a.z": set()}
    assert cycles(package_graph(graph)) == []
    graph["pipelines.b.y"].add("pipelines.a.z")
    assert cycles(package_graph(graph)) == [["pipelines.a", "pipelines.b", "pipelines.a"]]


def test_no_import_cycle_between_packages_but_through_the_config_root():
    found = cycles(package_graph(import_graph(module_names())))
    assert not found, "package import cycles in pipelines/:\n" + "\n".join(" -> ".join(c) for c in found)


STAGES = ("ask", "cluster", "eval", "ingest", "learn", "plan", "quickstart", "rollout", "serve")


def test_the_shared_contracts_know_no_stage():
    """pipelines/data/ (task rows, chunk store, manifest, document index, tokenizer identity) is
    what every stage reads: importing a stage from it would tie every stage to that one."""
    graph = import_graph(module_names())
    stray = sorted(f"{m} -> {d}" for m, deps in graph.items() if package_of(m) == "pipelines.data" for d in deps
                   if package_of(d) in {f"pipelines.{s}" for s in STAGES} | {"pipelines.cli", "pipelines.config"})
    assert not stray, f"pipelines/data/ imports a stage: {stray}"


# Outside ingest, what of it may be imported: the config root composes its section, and the
# task builders make task rows on the fly (the eval ladder, training's held-out split, the
# quickstart, plan's length parser).
INGEST_OPEN = ("pipelines.ingest.builders",)
INGEST_EXCEPTIONS = {("pipelines.config", "pipelines.ingest.config")}


def test_no_stage_reaches_into_ingest_but_for_its_task_builders():
    modules = module_names()
    stray = sorted(f"{modules[n].relative_to(REPO)}:{line}: {m}" for n in modules if package_of(n) != "pipelines.ingest"
                   for line, m in imported(modules, n)
                   if package_of(m) == "pipelines.ingest" and not m.startswith(INGEST_OPEN)
                   and (n, m) not in INGEST_EXCEPTIONS)
    assert not stray, "imports of the ingest stage from outside it (use pipelines.data):\n" + "\n".join(stray)


def test_every_command_lives_in_its_packages_command_module():
    from pipelines.cli import COMMANDS, command

    stray = {name: target for name, (target, _) in COMMANDS.items()
             if not (target.partition(":")[0].endswith(".command") and target.count(".") == 2)}
    assert not stray, f"commands outside a <package>/command.py: {stray}"
    for name, (target, _) in COMMANDS.items():
        assert callable(command(target).add_arguments) and callable(command(target).run), name


def calls_outside(home: str, match) -> list[str]:
    """file:line of each call in pipelines/ outside the file `home` whose callee match(func) takes
    (calls only: a docstring's example is not one)."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(REPO).as_posix() != home:
            out += [f"{path.relative_to(REPO)}:{node.lineno}" for node in ast.walk(ast.parse(path.read_text()))
                    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and match(node.func)]
    return out


def on(func: ast.Attribute, name: str) -> bool:
    return isinstance(func.value, ast.Name) and func.value.id == name


def test_ray_is_started_or_joined_in_runtime_only():
    stray = calls_outside("pipelines/runtime.py", lambda f: f.attr == "init" and on(f, "ray"))
    assert not stray, f"ray.init outside pipelines/runtime.py (use runtime.connect or runtime.session): {stray}"


def test_files_are_renamed_into_place_in_storage_only():
    """os.replace / os.rename, Path.rename, a filesystem's or shutil's move: the atomic write's rename."""
    stray = calls_outside("pipelines/storage.py", lambda f: f.attr in ("rename", "move") or
                          (f.attr == "replace" and on(f, "os")))
    assert not stray, f"a rename outside pipelines/storage.py (use storage.written, staged_dir, into_place): {stray}"


def test_every_import_names_a_module_that_exists():
    """Lazy imports run only when their function does: a moved module must not leave one behind."""
    modules = module_names()
    missing = [f"{modules[n].relative_to(REPO)}:{line}: {m}" for n in modules for line, m in imported(modules, n)
               if m not in modules]
    assert not missing, "imports of modules that do not exist:\n" + "\n".join(missing)


def test_every_module_imports_in_a_fresh_interpreter():
    names = sorted(module_names())
    script = (
        "import importlib, sys, traceback\n"
        "failed = []\n"
        f"for name in {names!r}:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception:\n"
        "        failed.append(name + ': ' + traceback.format_exc().strip().splitlines()[-1])\n"
        "print('\\n'.join(failed))\n"
        "sys.exit(1 if failed else 0)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"modules that do not import:\n{done.stdout}{done.stderr[-2000:]}"


def test_only_the_driver_drives_loops():
    """One loop driver (engine/driver.run_loop). Besides the agent package itself, only the rollout
    benchmark's step-synchronous baseline (what it measures) and the SFT traces, which script the
    loop's turns from task evidence instead of an engine, step a loop by hand."""
    allowed = {"pipelines/engine/driver.py", "pipelines/learn/traces.py", "benchmarks/rollout.py"}
    files = [p for folder in ("pipelines", "benchmarks") for p in (REPO / folder).rglob("*.py")]
    callers = {str(p.relative_to(REPO)) for p in files if "next_request()" in p.read_text()}
    stray = sorted(c for c in callers - allowed if not c.startswith("pipelines/agent/"))
    assert not stray, f"loops stepped outside the driver: {stray}"


def test_the_learner_reaches_rollouts_through_the_typed_source_only():
    """The RL learner calls no actor but the driver's progress board: the rollout side is a
    rollout.source.RolloutSource (typed batches, cursor, publish), never the hub's handle."""
    path = PACKAGE / "learn" / "trainer.py"
    calls = [node for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Call)
             and isinstance(node.func, ast.Attribute) and node.func.attr == "remote"]
    stray = [f"{node.lineno}: {ast.unparse(node.func)}" for node in calls
             if not ast.unparse(node.func.value).startswith("run.board.")]
    assert calls and not stray, f"actor calls in learn/trainer.py besides the board's: {stray}"
    hub = [m for _, m in imported(module_names(), "pipelines.learn.trainer") if m == "pipelines.rollout.hub"]
    assert not hub, "learn/trainer.py imports the rollout hub (use pipelines.rollout.source)"
