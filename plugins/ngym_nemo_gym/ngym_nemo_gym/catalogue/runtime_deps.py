"""Libraries a NeMo Gym environment imports without declaring them, because NeMo Gym's own install brings them.

Under NeMo Gym 0.7.0 every environment runs in a virtualenv that holds ``nemo-gym`` and its whole dependency
closure (Ray, numpy through scipy and pyarrow, pandas through mlflow, datasets, tqdm, requests, ...), so an
environment can ``import ray`` or ``import numpy`` while its ``requirements.txt`` names only ``nemo-gym``.
ngym drops that self-reference (the compat distribution ``ngym-nemo-gym`` replaces it) and does not install
NeMo Gym's closure wholesale: ngym's own core stays lean, and most environments need none of it.

Instead ``ngym install`` reads which of these libraries the environment's Python files (and the companion
folders installed with it) import, and adds those it does not declare itself. ``RUNTIME_IMPORTS`` maps an import
name to the requirement NeMo Gym 0.7.0's install satisfies it with; lower bounds follow NeMo's own pins where it
pins a direct dependency. Libraries ngym or ``ngym-nemo-gym`` already depend on (fastapi, pydantic, yaml,
openai, aiohttp, omegaconf, orjson, httpx, mcp) are not listed.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

#: import name → requirement, for the packages of NeMo Gym 0.7.0's dependency closure its environments import.
RUNTIME_IMPORTS: dict[str, str] = {
    # Direct dependencies of nemo-gym 0.7.0 (its Requires-Dist), with its lower bounds.
    # Ray without the [default] extra: `@ray.remote` and `ray.init()` need only the core; [default] adds the
    # dashboard and a cluster launcher that a single server process does not use.
    "ray": "ray>=2.58",
    "scipy": "scipy>=1.14.1",
    "pyarrow": "pyarrow>=23.0.1",
    "datasets": "datasets>=3.0",
    "tqdm": "tqdm>=4.66",
    "jinja2": "jinja2>=3.1",
    "psutil": "psutil>=5.9",
    "urllib3": "urllib3>=2.8.0",
    "rich": "rich>=13",
    "packaging": "packaging>=24.2",
    "devtools": "devtools>=0.12",
    "mlflow": "mlflow>=3.16.1",
    "wandb": "wandb>=0.30.0",
    "git": "GitPython>=3.1.61",
    "jwt": "PyJWT>=2.15.1",
    "sqlparse": "sqlparse>=0.6.0",
    "pydot": "pydot>=3",
    "hydra": "hydra-core>=1.3",
    "anthropic": "anthropic>=0.40,<=0.109.2",
    # Brought by those (numpy by scipy and pyarrow, pandas and scikit-learn by mlflow, requests by ray,
    # huggingface_hub by datasets, ...).
    "numpy": "numpy>=1.26",
    "pandas": "pandas>=2.2",
    "requests": "requests>=2.31",
    "huggingface_hub": "huggingface_hub>=0.24",
    "PIL": "pillow>=10",
    "matplotlib": "matplotlib>=3.8",
    "sklearn": "scikit-learn>=1.5",
    "jsonschema": "jsonschema>=4.20",
    "docker": "docker>=7.1",
    "dotenv": "python-dotenv>=1.0",
    "typing_extensions": "typing_extensions>=4.12",
}


#: Libraries that come along with another in NeMo Gym's install: there numpy arrives through scipy, so code an
#: environment runs with its own interpreter (a template of model-written Python, like nvarc's transform
#: sandbox) can import scipy wherever it can import numpy; without it such a row scores 0.0 under ngym and 1.0
#: under NeMo Gym, a silent wrong reward.
COMES_WITH: dict[str, tuple[str, ...]] = {"numpy": ("scipy",)}

#: ``import x`` / ``from x import`` at the start of a line of a code template held in a string.
_TEMPLATE_IMPORT = re.compile(r"^[ \t]*(?:import|from)[ \t]+([A-Za-z_][A-Za-z0-9_]*)", re.MULTILINE)


def imported_top_level_modules(files: Iterable[Path]) -> set[str]:
    """The top-level module names ``import x.y`` / ``from x.y import z`` name in ``files`` (absolute imports),
    also inside multi-line strings (code templates an environment runs in a subprocess of its interpreter) and
    in calls that import by name (``pytest.importorskip("x")``, ``importlib.import_module("x")``)."""
    found: set[str] = set()
    for path in files:
        try:
            tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"), filename=str(path))
        except SyntaxError:
            continue  # a file the environment never imports (a template, a Python 2 script): not ours to judge
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "\n" in node.value:
                found.update(_TEMPLATE_IMPORT.findall(node.value))
            elif (name := _imported_by_call(node)) is not None:
                found.add(name.split(".")[0])
    return found


#: Calls that import the module their first argument names (``pytest.importorskip("jinja2")`` skips a test
#: silently when the library is missing: vibench's template tests did so under ngym and ran under NeMo Gym).
_IMPORTING_CALLS = frozenset({"importorskip", "import_module", "__import__"})


def _imported_by_call(node: ast.AST) -> str | None:
    if not isinstance(node, ast.Call) or not node.args:
        return None
    func = node.func
    called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    first = node.args[0]
    if called in _IMPORTING_CALLS and isinstance(first, ast.Constant) and isinstance(first.value, str):
        return first.value
    return None


def python_files(folders: Iterable[Path]) -> list[Path]:
    return [
        path
        for folder in folders
        for path in sorted(folder.rglob("*.py"))
        if "__pycache__" not in path.parts and ".venv" not in path.parts
    ]


def runtime_requirements(folders: Iterable[Path]) -> list[str]:
    """Requirements for the NeMo-runtime libraries the Python files under ``folders`` import, in
    ``RUNTIME_IMPORTS`` order."""
    folders = list(folders)
    files = python_files(folders)
    # An environment's own module or package of the same name (a local ``docker.py``) is not the library.
    local = {path.stem for path in files} | {d.name for folder in folders for d in folder.rglob("*") if d.is_dir()}
    imported = imported_top_level_modules(files) - local
    imported |= {extra for module in list(imported) for extra in COMES_WITH.get(module, ())}
    return [requirement for module, requirement in RUNTIME_IMPORTS.items() if module in imported]


def not_declared(requirements: Iterable[str], declared: Iterable[str]) -> list[str]:
    """Those of ``requirements`` whose project ``declared`` (PEP 508 strings; other lines ignored) does not name."""
    declared_names = set()
    for line in declared:
        try:
            declared_names.add(canonicalize_name(Requirement(line).name))
        except InvalidRequirement:
            continue
    return [r for r in requirements if canonicalize_name(Requirement(r).name) not in declared_names]


def undeclared_runtime_requirements(folders: Iterable[Path], declared: Iterable[str]) -> list[str]:
    """Requirements for the NeMo-runtime libraries the Python files under ``folders`` import and ``declared``
    (PEP 508 strings) does not name, in ``RUNTIME_IMPORTS`` order."""
    return not_declared(runtime_requirements(folders), declared)
