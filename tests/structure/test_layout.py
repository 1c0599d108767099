"""The installer wing, which runs on air-gapped nodes, has no network client in it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import lockbuild

PACKAGE = Path(lockbuild.__file__).parent
# The node's own packages: the installer, its choice among builds, and the model cache it places.
NODE_PACKAGES = ("install", "choice", "hubcache")
NETWORK = (
    "httpx",
    "pycurl",
    "lockbuild.builder",
    "lockbuild.fetch",
    "lockbuild.sdist",
    "lockbuild.resolution",
    "lockbuild.registry",
    "urllib.request",
    "http.client",
    "socket",
    "requests",
)


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_installer_modules_import_no_network_code() -> None:
    for path in sorted(p for pkg in NODE_PACKAGES for p in (PACKAGE / pkg).glob("*.py")):
        bad = {n for n in _imports(path) if n.startswith(NETWORK)}
        assert not bad, f"{path.name} imports {bad}"


def test_install_and_verify_load_no_network_module() -> None:
    code = (
        "import sys\n"
        "import lockbuild.install.installer, lockbuild.install.survey, lockbuild.trust, lockbuild.bundle.read\n"
        "from lockbuild.cli import main\n"
        "from click.testing import CliRunner\n"
        "CliRunner().invoke(main, ['install', '--help'])\n"
        "CliRunner().invoke(main, ['verify', '--help'])\n"
        f"print(sorted(m for m in sys.modules if m.startswith({NETWORK!r})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


BUILDER_ONLY = (
    "lockbuild.recipe",
    "lockbuild.builder",
    "lockbuild.fetch",
    "lockbuild.sdist",
    "lockbuild.resolution",
    "tomlkit",
)


def _lockbuild_imports(module: str) -> set[str]:
    """The lockbuild modules ``module`` imports anywhere in its text (function-level imports included)."""
    rel = module.removeprefix("lockbuild").lstrip(".").replace(".", "/")
    path = PACKAGE / f"{rel}.py" if (PACKAGE / f"{rel}.py").exists() else PACKAGE / rel / "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return {n for n in found if n.startswith(BUILDER_ONLY) or _is_module(n)}


def _is_module(name: str) -> bool:
    if not name.startswith("lockbuild"):
        return False
    rel = name.removeprefix("lockbuild").lstrip(".").replace(".", "/")
    return (PACKAGE / f"{rel}.py").exists() or (PACKAGE / rel / "__init__.py").exists()


def test_the_node_never_imports_the_recipe_or_the_builder() -> None:
    """install/ acts on the signed manifest only: neither it nor anything it imports, transitively and
    including imports inside functions, reaches the recipe parser or the builder."""
    start = {
        f"lockbuild.{pkg}.{p.stem}"
        for pkg in NODE_PACKAGES
        for p in (PACKAGE / pkg).glob("*.py")
        if p.stem != "__init__"
    }
    seen: dict[str, str] = {m: m for m in start}
    todo = sorted(start)
    while todo:
        module = todo.pop()
        for name in _lockbuild_imports(module):
            assert not name.startswith(BUILDER_ONLY), f"{seen[module]} reaches {name} (through {module})"
            if name not in seen and _is_module(name):
                seen[name] = seen[module]
                todo.append(name)
    assert "lockbuild.install.installer" in seen and "lockbuild.bundle.manifest" in seen


def test_the_cli_loads_the_self_tests_machinery_only_for_lockbuild_test() -> None:
    """Every command starts by importing lockbuild.cli: the self-test's modules (namespaces, tracing, the
    watch hook) load when `lockbuild test` runs, not with `lock` or `install` (start-up time counts)."""
    code = "import sys, lockbuild.cli; print(sorted(m for m in sys.modules if m.startswith('lockbuild.selftest')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['lockbuild.selftest']"


# --- one module for the file primitives ---------------------------------------------------

# The package of file primitives (lockbuild/fsio/): its modules are the primitives themselves, so they
# may open, create and delete; nothing else is exempt as a whole.
PRIMITIVES = "fsio/"
# Library modules that may still call os.open themselves, each with its reason. Everything else opens,
# lists and deletes through lockbuild.fsio; a new direct call fails this test.
OS_OPEN_ALLOWED = {
    "install/places.py": "makes ROOT/ENGINE by descriptor and fchmods it (one O_DIRECTORY|O_NOFOLLOW open)",
    "fetch/cache.py": "the builder's own content-addressed cache, checked by sha256 on every read",
}
DELETE_BY_PATH_ALLOWED = {
    "install/installer.py": "its own staging directories under ROOT/ENGINE, which places.py proved this user's",
    "install/pythons.py": "its own staging under ROOT/.python, proved this user's",
    "install/swap.py": "its lock file, unlinked only when it is still the inode it locked",
    "selftest/workdir.py": "the self-test's private 0700 directory",
    "sdist/prebuild.py": "a private temporary directory of the builder's",
    "builder/output.py": "the builder's own --out staging",
    "builder/pack.py": "the builder's own --out staging",
    "resolution/memo.py": "the builder's own cache",
    "fetch/cache.py": "the builder's own cache",
    "fetch/kernelcache.py": "the builder's own cache's kept GPU readings and their temp files",
    "fetch/fetcher.py": "the builder's own cache's partial downloads",
    "site/delta.py": "the delta writer's own work directory under --out",
    "site/partlist.py": "the splitter's own temporary part files under --out",
    "trust/sign.py": "its own temporary .minisig",
    "minisign/keyfiles.py": "its own temporary key file",
}


def _calls(path: Path, names: set[str]) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            f = node.func
            dotted = ast.unparse(f)
            if dotted in names or (
                isinstance(f, ast.Attribute)
                and f.attr in {n.split(".")[-1] for n in names}
                and dotted.split(".")[0] in ("os", "shutil")
            ):
                found.append(f"{dotted} (line {node.lineno})")
    return found


def _library() -> list[tuple[str, Path]]:
    return [(p.relative_to(PACKAGE).as_posix(), p) for p in sorted(PACKAGE.rglob("*.py"))]


def _outside_the_primitives() -> list[tuple[str, Path]]:
    return [(rel, p) for rel, p in _library() if not rel.startswith(PRIMITIVES)]


def test_the_primitives_are_the_fsio_package() -> None:
    """The exemption names the package that holds the primitives, and only it: the calls the rules below
    forbid everywhere else are made there."""
    inside = [p for rel, p in _library() if rel.startswith(PRIMITIVES)]
    assert (PACKAGE / PRIMITIVES / "__init__.py").exists() and not (PACKAGE / "fsio.py").exists()
    assert any(_calls(p, {"os.open"}) for p in inside)
    assert any(_calls(p, {"shutil.rmtree", "os.unlink"}) for p in inside)


def test_only_fsio_calls_os_open_outside_the_allow_list() -> None:
    offenders = {rel: _calls(p, {"os.open"}) for rel, p in _outside_the_primitives() if rel not in OS_OPEN_ALLOWED}
    assert {k: v for k, v in offenders.items() if v} == {}, "open through lockbuild.fsio"


def test_only_fsio_deletes_trees_and_files_by_path_outside_the_allow_list() -> None:
    names = {"shutil.rmtree", "os.unlink", "os.remove", "os.rmdir"}
    offenders = {}
    for rel, p in _outside_the_primitives():
        if rel in DELETE_BY_PATH_ALLOWED:
            continue
        hits = _calls(p, names) + [
            f".unlink (line {n})"
            for n, line in enumerate(p.read_text().splitlines(), 1)
            if ".unlink(" in line and "os.unlink" not in line
        ]
        if hits:
            offenders[rel] = hits
    assert offenders == {}, "delete through lockbuild.fsio.remove_at / remove_tree"


WRITE_BY_PATH_ALLOWED = {
    "selftest/trace.py": "opens, for writing, the FIFO it made itself, to unblock its own reader: creates nothing",
    "builder/selfwheel.py": "writes lockbuild's wheel into an io.BytesIO (zipfile.ZipFile(buf, 'w')), not a path",
}


PATH_FIRST_OPENERS = {
    "open",
    "io.open",
    "builtins.open",
    "codecs.open",
    "gzip.open",
    "bz2.open",
    "lzma.open",
    "zstandard.open",
    "tarfile.open",
    "zipfile.ZipFile",
    "ZipFile",
    "tarfile.TarFile",
}
WRITERS_BY_PATH = {"shutil.copy", "shutil.copy2", "shutil.copyfile", "shutil.move", "shutil.copytree", "os.truncate"}


def _writing(mode: ast.expr | None) -> bool:
    """A mode that may write (or one not written out, which may)."""
    if mode is None:
        return False
    return not (isinstance(mode, ast.Constant) and isinstance(mode.value, str) and not set(mode.value) & set("wax+"))


def _writes_by_path(path: Path) -> list[str]:
    """Calls that create or write a file by its path (following a link, or over a file that exists):
    ``open`` and its cousins (``io``, ``codecs``, ``gzip``, ``tarfile``, ``ZipFile``...) or ``Path.open`` in a
    writing mode, ``write_text``, ``write_bytes``, ``touch``, ``shutil.copy*``/``move``/``copytree``, and
    those names imported under others. (A mode held in a variable and passed by position to ``Path.open`` is
    not told from ``ZipFile.open(member)``, which reads: write it as ``mode=``.)"""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module in ("shutil", "io", "builtins", "codecs", "os"):
            bad = {a.name for a in node.names} & {"copy", "copy2", "copyfile", "move", "copytree", "open", "truncate"}
            if bad:
                found.append(f"from {node.module} import {', '.join(sorted(bad))} (line {node.lineno})")
        if not isinstance(node, ast.Call):
            continue
        f, dotted = node.func, ast.unparse(node.func)
        mode: ast.expr | None = next((k.value for k in node.keywords if k.arg == "mode"), None)
        if (
            isinstance(f, ast.Attribute) and f.attr in ("write_text", "write_bytes", "touch")
        ) or dotted in WRITERS_BY_PATH:
            found.append(f"{dotted} (line {node.lineno})")
        elif dotted in PATH_FIRST_OPENERS:  # open(PATH, MODE)
            if _writing(mode if mode is not None else (node.args[1] if len(node.args) > 1 else None)):
                found.append(f"{dotted}(…) in a writing mode (line {node.lineno})")
        elif isinstance(f, ast.Attribute) and f.attr == "open" and not dotted.startswith("os."):
            if mode is None and len(node.args) > 1:
                mode = node.args[1]  # ZipFile.open(NAME, MODE)
            elif mode is None and node.args and isinstance(node.args[0], ast.Constant):
                mode = node.args[0]  # Path.open(MODE)
            if _writing(mode):
                found.append(f"{dotted}(mode={ast.unparse(mode) if mode else ''}) (line {node.lineno})")
    return found


def test_every_file_lockbuild_creates_is_made_by_fsio() -> None:
    """One primitive creates files: ``fsio.create_new`` (O_EXCL|O_NOFOLLOW), with ``fsio.temp_beside`` naming
    the temporary file renamed over a result. A write by path follows a link planted in a directory another
    user can write (``--out``, a shared dist directory) and truncates whatever it points at."""
    offenders = {
        rel: hits
        for rel, p in _outside_the_primitives()
        if rel not in WRITE_BY_PATH_ALLOWED and (hits := _writes_by_path(p))
    }
    assert offenders == {}, "create files through lockbuild.fsio.create_new / write_new"
    libs = dict(_library())
    stale = [rel for rel in WRITE_BY_PATH_ALLOWED if not _writes_by_path(libs[rel])]
    assert stale == [], f"no longer needs its allowance: {stale}"


def test_the_allow_lists_name_only_modules_that_exist_and_need_them() -> None:
    libs = dict(_library())
    for rel in OS_OPEN_ALLOWED:
        assert rel in libs, rel
    stale = [rel for rel in OS_OPEN_ALLOWED if not _calls(libs[rel], {"os.open"})]
    assert stale == [], f"no longer needs its os.open allowance: {stale}"


# --- the wings' layers: what the installer may import, no cycles, public names -----------------------

NOT_FROM_INSTALL = (
    "lockbuild.site",
    "lockbuild.registry",
    "lockbuild.builder",
    "lockbuild.fetch",
    "lockbuild.sdist",
    "lockbuild.resolution",
    "lockbuild.recipe",
)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _type_only(tree: ast.Module) -> set[int]:
    """The ids of the import nodes under ``if TYPE_CHECKING:``: names for the type checker, never run."""
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            ids.update(id(n) for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom)))
    return ids


def _edges(path: Path, modules: dict[str, Path]) -> dict[str, int]:
    """The lockbuild modules ``path`` imports when it runs, at any depth (an import inside a function counts:
    it runs when the function does), each with the line of its first import; ``from PKG import NAME`` is
    the submodule PKG.NAME where there is one, else PKG."""
    tree = ast.parse(path.read_text())
    skip = _type_only(tree)
    found: dict[str, int] = {}
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names if a.name in modules]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [
                f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module for a in node.names
            ]
            names = [n for n in names if n in modules]
        else:
            continue
        for n in names:
            found.setdefault(n, node.lineno)
    found.pop(_module_name(path), None)
    return found


def test_the_installer_imports_nothing_of_the_site_the_builder_or_the_recipe() -> None:
    """install/ runs on the node: a store's or a folder's candidates reach it through
    ``install.choose.Place``, which the command layer feeds. No module of install/, nor anything it imports
    (transitively, imports inside functions included), imports site/, builder/ or recipe/."""
    modules = _modules()
    start = sorted(m for m in modules if m.startswith(tuple(f"lockbuild.{pkg}." for pkg in NODE_PACKAGES)))
    via: dict[str, str] = {m: m for m in start}
    todo = list(start)
    bad = []
    while todo:
        module = todo.pop()
        for name, line in _edges(modules[module], modules).items():
            if name.startswith(NOT_FROM_INSTALL):
                bad.append(f"{module} (line {line}) imports {name}, reached from {via[module]}")
            elif name not in via:
                via[name] = via[module]
                todo.append(name)
    assert bad == []
    assert "lockbuild.choice.choose" in via and "lockbuild.trust.opener" in via


def test_no_import_cycles_in_the_package() -> None:
    """No module reaches itself through the modules it imports (imports inside functions included: a
    deferred import is a cycle put off, not removed; ``if TYPE_CHECKING:`` names are not imports)."""
    modules = _modules()
    graph = {m: sorted(_edges(p, modules)) for m, p in modules.items()}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def walk(m: str) -> None:
        state[m] = 1
        path.append(m)
        for n in graph[m]:
            if state.get(n) == 1:
                cycles.append([*path[path.index(n) :], n])
            elif n not in state:
                walk(n)
        path.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            walk(m)
    assert cycles == [], "\n".join(" -> ".join(c) for c in cycles)


def _private_imports() -> set[tuple[str, str, str]]:
    found = set()
    for module, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("lockbuild"):
                found.update(
                    (module, node.module, a.name)
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                )
    return found


def test_what_a_module_needs_from_another_is_public() -> None:
    found = _private_imports()
    assert sorted(found) == [], "import a public name (rename it where it is defined)"


def _names_used(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    names |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    names |= {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    return names


def test_only_the_signing_process_reads_a_secret_key() -> None:
    """A user's secret key is decrypted in the signing process alone (trust/signproc.py, started fresh by
    trust/sign.py::sign_in_fresh_process): no other module names the reader. The minisign package defines it."""
    allowed = {"trust/signproc.py", "minisign/__init__.py", "minisign/keyfiles.py"}
    readers = sorted(
        rel
        for path in sorted(PACKAGE.rglob("*.py"))
        if (rel := path.relative_to(PACKAGE).as_posix()) not in allowed and "read_secret_key" in _names_used(path)
    )
    assert readers == [], f"these modules read a secret key outside the signing process: {readers}"


# Each of these rules is defined once, in the module named; everyone else imports it.
ONE_DEFINITION = {
    "is_loopback": "wire/urls.py",
    "bundle_name": "bundle/manifest.py",
}


def test_each_rule_is_defined_in_one_module() -> None:
    """A rule written twice drifts apart (one copy strips ``[]`` from an IPv6 host, the other does not):
    each rule in ONE_DEFINITION has one ``def`` in the package, in its own module. A wrapper that only
    calls the one definition uses another name."""
    found: dict[str, list[str]] = {name: [] for name in ONE_DEFINITION}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.parse(path.read_text()).body:  # module-level functions (a method may share the name)
            if isinstance(node, ast.FunctionDef) and node.name in found:
                found[node.name].append(path.relative_to(PACKAGE).as_posix())
    wrong = {name: places for name, places in found.items() if places != [ONE_DEFINITION[name]]}
    assert wrong == {}, f"defined elsewhere or more than once: {wrong}"


def test_only_the_command_layer_imports_click() -> None:
    """The command layer parses, calls the library and renders: all click code is in commands/ (one module
    per family of commands), cli.py (the root group) and commands/clikit.py (the shared options and output)."""
    layer = {"cli.py", "commands/clikit.py"}
    found = sorted(
        rel
        for path in sorted(PACKAGE.rglob("*.py"))
        if not (rel := path.relative_to(PACKAGE).as_posix()).startswith("commands/")
        and rel not in layer
        and any(name == "click" or name.startswith("click.") for name in _imports(path))
    )
    assert found == [], f"click code outside the command layer: {found}"


# The packages each package may import ("." is the top-level modules, the core, which any package may
# import). docs/architecture.md's table of packages says the same; a new arrow is a decision made in both.
ARROWS: dict[str, set[str]] = {
    ".": {"commands", "proc", "wire"},  # cli.py is the command layer's root; settings.py applies wire's rules
    "builder": {
        "bundle",
        "fetch",
        "fsio",
        "gpu",
        "proc",
        "recipe",
        "resolution",
        "sdist",
        "trust",
        "vulns",
    },
    "bundle": {"frames", "fsio", "gpu", "proc"},
    "frames": {"bundle"},
    "choice": {"bundle", "gpu", "install", "trust"},
    "commands": {"*"},
    "fetch": {"fsio", "gpu", "recipe", "resolution", "sdist", "vulns", "wire"},
    "fsio": set(),
    "gpu": set(),
    "hubcache": {"bundle", "choice", "fsio", "install", "trust"},
    "image": {"bundle", "fsio", "install", "proc", "trust"},
    "install": {"bundle", "choice", "fsio", "gpu", "hubcache", "proc", "trust"},
    "minisign": {"fsio"},
    "proc": set(),
    "recipe": {"bundle", "fsio", "gpu", "wire"},
    "registry": {"bundle", "fsio", "site", "trust", "wire"},
    "resolution": {"bundle", "fetch", "fsio", "proc", "recipe", "sdist"},
    "sdist": {"bundle", "fetch", "fsio", "proc", "recipe"},
    "selftest": {"bundle", "fsio", "hubcache", "install", "proc", "site", "trust"},
    "site": {"bundle", "choice", "fsio", "image", "install", "trust", "vulns"},  # named_source picks ImageFile
    "trust": {"bundle", "frames", "fsio", "minisign"},
    "vulns": {"bundle", "fsio", "trust"},
    "wire": set(),
}


def test_the_arrows_between_packages() -> None:
    """Every import between packages (deferred ones included) follows an arrow of ARROWS; every package
    has its entry (a new package says what it may import)."""
    packages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")} | {"."}
    assert packages - {"__pycache__"} == set(ARROWS), "give every package its arrows in ARROWS and the docs"
    wrong = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).parts
        src = rel[0] if len(rel) > 1 else "."
        for name in _imports(path) | {f"{m}.x" for m in _imports(path)}:
            parts = name.split(".")
            if parts[0] != "lockbuild" or len(parts) < 2:
                continue
            dst = parts[1] if (PACKAGE / parts[1]).is_dir() else "."
            if dst not in (src, ".") and "*" not in ARROWS[src] and dst not in ARROWS[src]:
                wrong.add(f"{src} -> {dst} ({path.relative_to(PACKAGE)})")
    assert sorted(wrong) == []


# The signature scheme is a port (trust/scheme.py): these alone name minisign's codec.
MINISIGN_IMPORTERS = {
    "trust/minisignscheme.py": "the scheme's one adapter",
    "trust/signproc.py": "the signing process: it reads the secret key and signs, importing nothing afterwards",
    "commands/signing.py": "keygen: writes a minisign key pair",
}


def _names_minisign(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import) and any(
            a.name == "lockbuild.minisign" or a.name.startswith("lockbuild.minisign.") for a in node.names
        ):
            return True
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            if node.module == "lockbuild.minisign" or node.module.startswith("lockbuild.minisign."):
                return True
            if node.module == "lockbuild" and any(a.name == "minisign" for a in node.names):
                return True
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value.startswith("lockbuild.minisign")
        ):
            return True  # importlib.import_module("lockbuild.minisign...")
    return False


def test_only_the_scheme_adapter_keygen_and_the_signing_process_import_minisign() -> None:
    """The policy counts identities and the store and the registry carry signature files: what a block is,
    whom it names and what it says is the scheme's (trust/scheme.py), so a second scheme is one adapter.
    Imports inside functions count; the minisign package itself is the codec."""
    found = sorted(
        rel
        for path in sorted(PACKAGE.rglob("*.py"))
        if not (rel := path.relative_to(PACKAGE).as_posix()).startswith("minisign/")
        and rel not in MINISIGN_IMPORTERS
        and _names_minisign(path)
    )
    assert found == [], f"these modules import lockbuild.minisign; use lockbuild.trust.scheme.SCHEME: {found}"
    unneeded = sorted(rel for rel in MINISIGN_IMPORTERS if not _names_minisign(PACKAGE / rel))
    assert unneeded == [], f"the allow-list names modules that no longer import lockbuild.minisign: {unneeded}"
