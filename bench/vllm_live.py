"""``bench/run --workload vllm-live [--live-version V]``: the real workload. ``bundles/vllm.toml``'s build of
vLLM V (default 0.33.0, CUDA 13: 199 packages, 4.3 GB; 0.11.0 cu128: 141 packages, 4.9 GB), locked, built and
installed from the real PyPI, next to its floors and the classic path, in the same run:

    lock         lockbuild lock                        | uv pip compile with the same flags (cold caches)
                 lockbuild lock, warm cache (uv's resolution reused; every pin still checked on the index)
    fetch        raw parallel download (curl, 8 streams) of the lock's files, nothing checked
    build        lockbuild build, cold cache           | the transfer floor: uv pip compile + curl --parallel;
                                                         the stock pipeline: uv pip compile + curl + sha256sum -c
                                                         + tar | zstd -T0 -3 + minisign -S (after each cold build)
                 lockbuild build, warm cache           | tar cf - | zstd -T0 -3 of the same files
    verify       lockbuild verify                      | b2sum (BLAKE2b-512, one thread), sha256sum, openssl sha256
    install      lockbuild install                     | uv venv + uv pip install --offline + the verify command
                                                         (cache on the same disk); bare uv: no hashes, no verify
    import       lockbuild import (a new store)        | one sha256 pass + a copy of the bundle (openssl; cp)
    push         lockbuild push --store and .lbz      | raw parallel upload of the same blobs (curl POST + PUT, 4)
    push-pull    lockbuild push, pull (local registry) | raw parallel fetch of the same blobs from the same
                                                         registry (curl --parallel 8) + openssl sha256 of each
    install-store lockbuild install ENGINE/VERSION-VARIANT --store | the same bare-uv floor as install
    classic      pip download + tar czf + pip install --no-index (skipped with --quick)

The builds carry a measured `gpu` table, so every install states the node's GPU facts (an H100 on driver 580,
through LOCKBUILD_GPU_FACTS; the GPU probe is skipped: this machine has no GPU). The site path (import,
push-pull, install-store) needs docker-registry (CNCF distribution) for push-pull; the store install links the
store's blobs (the store and the root share this disk).

It needs about 25 GB of free disk under bench/work/ (the cache, the bundles, two environments of 9 GB):
it checks first and refuses to start with less. The lockbuild cache is kept in bench/work/vllm-live-V/cache
between runs (``--phases`` without ``build-cold`` then reuses it; the cold build always starts empty).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.floor import minisign_key
from bench.liveratios import (
    B2SUM,
    CL_DL,
    CL_INST,
    CL_TGZ,
    COLD,
    IMPORT,
    IMPORT_FLOOR,
    INSTALL,
    INSTALL_STORE,
    LB_LOCK,
    LB_RELOCK,
    OPENSSL,
    PULL,
    PUSH,
    RAW,
    RAW_PULL,
    SHA256SUM,
    ST_CURL,
    ST_SIGN,
    ST_SUM,
    ST_UV,
    ST_ZSTD,
    STOCK,
    TRANSFER,
    UV_BARE,
    UV_INSTALL,
    UV_LOCK,
    VERIFY,
    WARM,
    ZSTD,
    ratios,
)
from bench.measure import Run, StepFailed, run, wait_quiet
from bench.suite import LOCKBUILD, PIP, Results, clean_env
from lockbuild.proc.uvtool import uv_binary

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent / "bundles" / "vllm.toml"
# vLLM's `vllm --version` builds its argument defaults, which infer the device and fail on a machine
# without a GPU ("Failed to infer device type"): the recipe verifies by importing the engine (torch and
# vllm), which a machine without a GPU can run. The bench refuses a recipe whose verify command would not.
VERIFY_NEEDS_NO_GPU = 'verify = ["python", "-c", "import vllm'
VERIFY_CODE = "import vllm; print('vllm', vllm.__version__)"  # the recipe's verify command (checked below)
ENGINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}


@dataclass(frozen=True)
class LiveTarget:
    """One vLLM release of the catalogue the workload measures: its version and the recipe's build."""

    version: str
    build: str  # the recipe's variant (`lockbuild lock --build`)

    @property
    def requirement(self) -> str:
        return f"vllm=={self.version}"

    @property
    def name(self) -> str:
        return f"vllm-live-{self.version}-{self.build}"


TARGETS = {t.version: t for t in (LiveTarget("0.33.0", "cu130-flashinfer"), LiveTarget("0.11.0", "cu128"))}
DEFAULT_VERSION = "0.33.0"
# The node the installs state (LOCKBUILD_GPU_FACTS): an H100 on driver 580, which both builds fit.
GPU_FACTS = {"driver": "580.65.06", "gpus": [{"name": "NVIDIA H100 80GB HBM3", "capability": "9.0"}]}
INDEX = "https://pypi.org/simple"
NEEDS_GB = 25
PHASES = (
    "lock",
    "fetch",
    "build-cold",
    "build-warm",
    "verify",
    "install",
    "import",
    "push-pull",
    "push",
    "install-store",
    "classic",
)


def free_gb(path: Path) -> float:
    path.mkdir(parents=True, exist_ok=True)
    return shutil.disk_usage(path).free / 1e9


def python312() -> str:
    """The node's interpreter for the measured builds (Python 3.12)."""
    for cand in ("python3.12", "/root/.pyenv/versions/3.12.1/bin/python3.12", "/usr/bin/python3.12"):
        found = shutil.which(cand)
        if found:
            try:
                run([found, "-c", "import sys; assert sys.version_info[:2] == (3, 12)"])
            except StepFailed:
                continue
            return found
    raise SystemExit("vllm-live needs a Python 3.12 interpreter (the bundle's); none found (python3.12 on PATH).")


class LiveSuite:
    def __init__(
        self,
        work: Path,
        keys: tuple[Path, Path],
        *,
        repeat: int,
        quick: bool,
        phases: tuple[str, ...],
        quiet_wait: float,
        log: Callable[[str], None],
        target: LiveTarget,
    ) -> None:
        self.work = work  # scratch of this run (removed at the end)
        self.target = target
        self.keep = HERE / "work" / f"vllm-live-{target.version}"  # the warm cache, kept between runs
        self.cache = self.keep / "cache"
        self.secret, self.trust = keys
        self.repeat, self.quick, self.phases, self.quiet_wait, self.log = repeat, quick, phases, quiet_wait, log
        self.r = Results(target.name)
        self.env = clean_env()
        self.python = python312()
        text = SOURCE.read_text(encoding="utf-8")
        if VERIFY_NEEDS_NO_GPU not in text or VERIFY_CODE not in text:
            raise SystemExit(f"{SOURCE} no longer verifies with {VERIFY_NEEDS_NO_GPU}...]; update bench/vllm_live.py.")
        work.mkdir(parents=True, exist_ok=True)
        # The node's interpreter here is a pyenv build under /root (0700): lockbuild installs with it only
        # into a root no other user can reach (an environment others can use needs a Python they can run).
        work.chmod(0o700)
        self.recipe = work / "vllm.toml"
        self.recipe.write_text(text, encoding="utf-8")
        self.facts = work / "gpu-facts.json"
        self.facts.write_text(json.dumps(GPU_FACTS), encoding="utf-8")
        self.env = {**self.env, "LOCKBUILD_GPU_FACTS": str(self.facts)}
        self.lock_doc: dict[str, Any] = {}
        self.bundle: Path | None = None
        self.files: Path | None = None  # the lock's files, as `lockbuild fetch --out` lays them out

    @property
    def tag(self) -> str:
        return f"{self.target.version}-{self.target.build}"

    # helpers -----------------------------------------------------------------------------------
    def lb_env(self, cache: Path) -> dict[str, str]:
        return {**self.env, "LOCKBUILD_CACHE_DIR": str(cache)}

    def run(self, argv: list[str], *, env: dict[str, str] | None = None, stdin: str | None = None) -> Run:
        os.sync()  # each command starts with no dirty pages of the one before it (their writeback is not its cost)
        wait_quiet(max_wait=self.quiet_wait)
        return run(argv, env=env or self.env, stdin=stdin)

    def shell(self, script: str, env: dict[str, str] | None = None) -> Run:
        return self.run(["bash", "-o", "pipefail", "-ec", script], env=env)

    def timed(self, phase: str, variant: str, r: Run, *, size: int = 0) -> Run:
        f = self.r.fig(phase, variant)
        f.add(r.seconds, r.max_rss_kb, r.cpu_s, r.others_cpu_s / max(r.seconds, 1e-9), r.self_rss_kb)
        if size:
            f.bytes = size
        self.log(f"  {variant}: {r.seconds:.1f} s, peak RSS {r.max_rss_kb / 1024:.0f} MB")
        return r

    def fresh(self, name: str) -> Path:
        p = self.work / name
        shutil.rmtree(p, ignore_errors=True)
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    def wanted_bytes(self) -> int:
        return sum(int(p["size"]) for p in self.lock_doc["packages"]) + sum(
            int(e.get("size") or 0) for e in self.lock_doc.get("extras", [])
        )

    def uv_compile(self, doc: dict[str, Any], output: Path) -> list[str]:
        """`uv pip compile` with the flags lockbuild's lock gives uv (the same Python, platform and cut-off)."""
        return [
            uv_binary(),
            "pip",
            "compile",
            "-",
            "--python-version",
            doc["python"],
            "--python-platform",
            doc["platform"],
            "--exclude-newer",
            doc["as_of"],
            "--index-url",
            INDEX,
            "--generate-hashes",
            "--no-header",
            "--quiet",
            "--only-binary",
            ":all:",
            "--output-file",
            str(output),
        ]

    # phases ------------------------------------------------------------------------------------
    def run_all(self) -> Results:
        self.phase_lock()  # always: the other phases need the lock
        for name in PHASES[1:]:
            if name in self.phases and not (name == "classic" and self.quick):
                self.log(f"[vllm-live] {name}")
                try:
                    getattr(self, "phase_" + name.replace("-", "_"))()
                except StepFailed as exc:  # the other phases' figures are still worth saving
                    self.log(f"  {name} FAILED: {exc}")
                    self.r.facts.setdefault("failed", {})[name] = str(exc)[:2000]
        self.r.ratios = ratios(self.r)
        self.r.facts.update({"repeat": self.repeat, "phases": list(self.phases)})
        return self.r

    def phase_lock(self) -> None:
        self.log("[vllm-live] lock")
        for _ in range(self.repeat):
            out = self.fresh("lock")
            r = self.timed(
                "lock",
                LB_LOCK,
                self.run(
                    [*LOCKBUILD, "lock", str(self.recipe), "--build", self.target.build, "--out", str(out), "--json"],
                    env=self.lb_env(self.fresh("lock-cache")),
                ),
            )
            doc = json.loads(r.stdout)["locks"][0]
            argv = self.uv_compile(doc, out / "uv.txt")
            self.timed(
                "lock",
                UV_LOCK,
                self.run(
                    argv,
                    env={**self.env, "UV_CACHE_DIR": str(self.fresh("uv-cache"))},
                    stdin=self.target.requirement + "\n",
                ),
            )
            self.lock_doc = doc
            if (self.cache / "sha256").is_dir():  # a rebuild's lock needs the kept cache of a build
                self._relock()
        shutil.rmtree(self.work / "relock", ignore_errors=True)
        shutil.rmtree(self.work / "lock-cache", ignore_errors=True)
        shutil.rmtree(self.work / "uv-cache", ignore_errors=True)
        self.r.facts.update(
            {
                "packages": len(self.lock_doc["packages"]),
                "as_of": self.lock_doc["as_of"],
                "fetch_files": len(self.lock_doc["packages"]) + len(self.lock_doc.get("extras", [])),
                "fetch_bytes": self.wanted_bytes(),
            }
        )

    def _relock(self) -> None:
        """A rebuild's lock: the kept cache of a build remembers uv's resolution and holds the wheels (each
        pin's METADATA is at hand); an untimed call fills the memory if needed."""
        relock = [
            *LOCKBUILD,
            "lock",
            str(self.recipe),
            "--build",
            self.target.build,
            "--out",
            str(self.work / "relock"),
            "--json",
        ]
        self.fresh("relock")
        self.run(relock, env=self.lb_env(self.cache))
        self.fresh("relock")
        r = self.timed("lock", LB_RELOCK, self.run(relock, env=self.lb_env(self.cache)))
        if not json.loads(r.stdout)["locks"][0].get("resolution_reused"):
            self.log("  (the warm lock did not reuse the remembered resolution)")

    def phase_fetch(self) -> None:
        urls = [(p["url"], p["file"]) for p in self.lock_doc["packages"]]
        urls += [(e["url"], e["path"].rsplit("/", 1)[-1]) for e in self.lock_doc.get("extras", [])]
        for _ in range(self.repeat):
            out = self.fresh("raw")
            out.mkdir()
            cfg = self.work / "curl.cfg"
            cfg.write_text("".join(f'url = "{u}"\noutput = "{out / n}"\n' for u, n in urls))
            r = self.timed(
                "fetch",
                RAW,
                self.run(["curl", "--parallel", "--parallel-max", "8", "--fail", "-sS", "-L", "-K", str(cfg)]),
            )
            got = sum(p.stat().st_size for p in out.iterdir())
            self.r.fig("fetch", RAW).bytes = got
            del r
            shutil.rmtree(out, ignore_errors=True)

    def _build(self, cache: Path, variant: str) -> dict[str, Any]:
        out = self.fresh("dist-" + ("cold" if "cold" in variant else "warm"))
        r = self.run(
            [
                *LOCKBUILD,
                "build",
                str(self.recipe),
                "--build",
                self.target.build,
                "--key",
                str(self.secret),
                "--out",
                str(out),
                "--json",
            ],
            env=self.lb_env(cache),
        )
        doc: dict[str, Any] = json.loads(r.stdout)["bundles"][0]
        self.timed("build", variant, r, size=int(doc.get("size") or 0))
        self.r.facts["bundle_bytes"] = int(doc.get("size") or 0)
        return doc

    def phase_build_cold(self) -> None:
        for i in range(self.repeat):
            cache = self.fresh("cold-cache")
            doc = self._build(cache, COLD)
            self.r.facts.setdefault("bundle_sha256", {}).setdefault("cold", []).append(doc["sha256"])
            self._stock_pipeline()
            self.bundle = Path(doc["bundle"])
            if i == self.repeat - 1:  # keep the newest cold cache as the warm one
                shutil.rmtree(self.cache, ignore_errors=True)
                self.cache.parent.mkdir(parents=True, exist_ok=True)
                cache.rename(self.cache)
                if not self.r.get("lock", LB_RELOCK):
                    for _ in range(self.repeat):
                        self._relock()
                    shutil.rmtree(self.work / "relock", ignore_errors=True)
            else:
                shutil.rmtree(cache, ignore_errors=True)

    def _stock_pipeline(self) -> None:
        """The cold build's two floors on the lock's files: resolve + download (the transfer floor), and the
        same work by stock tools one after another (resolve, download, sha256sum -c, tar | zstd, minisign -S),
        each step a process of its own, with the sums of their wall and CPU seconds."""
        files = [(p["url"], p["file"], p["sha256"]) for p in self.lock_doc["packages"]]
        files += [(e["url"], e["path"].rsplit("/", 1)[-1], e["sha256"]) for e in self.lock_doc.get("extras", [])]
        dl, tar = self.fresh("stock-files"), self.fresh("stock-tar")
        dl.mkdir()
        tar.mkdir()
        cfg, sums = self.work / "stock-curl.cfg", self.work / "stock-SHA256SUMS"
        cfg.write_text("".join(f'url = "{u}"\noutput = "{dl / n}"\n' for u, n, _ in files))
        sums.write_text("".join(f"{h}  {n}\n" for _, n, h in files))
        key = minisign_key(self.work)
        uv_env = {**self.env, "UV_CACHE_DIR": str(self.fresh("stock-uv-cache"))}
        steps = [
            (
                ST_UV,
                self.run(
                    self.uv_compile(self.lock_doc, self.work / "stock-uv.txt"),
                    env=uv_env,
                    stdin=self.target.requirement + "\n",
                ),
            ),
            (ST_CURL, self.run(["curl", "--parallel", "--parallel-max", "8", "--fail", "-sS", "-L", "-K", str(cfg)])),
            (ST_SUM, self.shell(f"cd {dl} && sha256sum -c --quiet {sums}")),
            (ST_ZSTD, self.shell(f"tar cf - -C {dl} . | zstd -T0 -3 -q -o {tar / 'b.tar.zst'}")),
            (ST_SIGN, self.run(["minisign", "-S", "-s", str(key), "-m", str(tar / "b.tar.zst")])),
        ]
        size = self.wanted_bytes()
        for name, r in steps:
            self.timed("build", name, r, size=size)
        for variant, part in ((TRANSFER, steps[:2]), (STOCK, steps)):
            wall = sum(r.seconds for _, r in part)
            f = self.r.fig("build", variant)
            f.add(
                wall,
                max(r.max_rss_kb for _, r in part),
                sum(r.cpu_s for _, r in part),
                sum(r.others_cpu_s for _, r in part) / max(wall, 1e-9),
            )
            f.bytes = size
            self.log(f"  {variant}: {wall:.1f} s, {sum(r.cpu_s for _, r in part):.1f} CPU-s")
        for p in (dl, tar, self.work / "stock-uv-cache"):
            shutil.rmtree(p, ignore_errors=True)

    def _files(self) -> Path:
        """The lock's files laid out by `lockbuild fetch --out` from the warm cache (not timed)."""
        if self.files is None:
            out = self.fresh("fetched")
            r = run(
                [*LOCKBUILD, "fetch", str(self.recipe), "--build", self.target.build, "--out", str(out), "--json"],
                env=self.lb_env(self.cache),
            )
            self.files = out / json.loads(r.stdout)["fetches"][0]["build"]
        return self.files

    def phase_build_warm(self) -> None:
        if not (self.cache / "sha256").is_dir():
            raise StepFailed(f"no warm cache at {self.cache}: run the build-cold phase first.")
        files = self._files()
        size = sum(p.stat().st_size for p in files.rglob("*") if p.is_file())
        for _ in range(self.repeat):
            doc = self._build(self.cache, WARM)
            self.r.facts.setdefault("bundle_sha256", {}).setdefault("warm", []).append(doc["sha256"])
            self.bundle = Path(doc["bundle"])
            tar = self.fresh("tar")
            tar.mkdir()
            self.timed(
                "build", ZSTD, self.shell(f"tar cf - -C {files} . | zstd -T0 -3 -q -o {tar / 'b.tar.zst'}"), size=size
            )
            shutil.rmtree(tar, ignore_errors=True)
        shas = {s for v in self.r.facts["bundle_sha256"].values() for s in v}
        self.r.facts["same_bytes_cold_warm"] = len(shas) == 1
        if len(shas) != 1:
            raise StepFailed(f"the cold and warm builds gave different bundles: {sorted(shas)}")

    def _need_bundle(self) -> Path:
        if self.bundle is None:
            self.log("  (building from the warm cache first, not timed)")
            doc = self._build(self.cache, "lockbuild build, warm cache (setup)")
            self.bundle = Path(doc["bundle"])
        return self.bundle

    def phase_verify(self) -> None:
        bundle = self._need_bundle()
        size = bundle.stat().st_size
        self.r.facts["bundle_bytes"] = size
        for _ in range(self.repeat):
            self.timed(
                "verify",
                VERIFY,
                self.run([*LOCKBUILD, "verify", str(bundle), "--trust", str(self.trust), "--json"]),
                size=size,
            )
            self.timed("verify", B2SUM, self.run(["b2sum", str(bundle)]), size=size)
            self.timed("verify", SHA256SUM, self.run(["sha256sum", str(bundle)]), size=size)
            self.timed("verify", OPENSSL, self.run(["openssl", "dgst", "-sha256", str(bundle)]), size=size)

    def phase_install(self) -> None:
        bundle = self._need_bundle()
        files = self._files()
        size = sum(p.stat().st_size for p in files.rglob("*") if p.is_file())
        for _ in range(self.repeat):
            root = self.fresh("root")
            self.timed(
                "install",
                INSTALL,
                self.run(
                    [
                        *LOCKBUILD,
                        "install",
                        str(bundle),
                        "--root",
                        str(root),
                        "--trust",
                        str(self.trust),
                        "--python",
                        self.python,
                        "--gpu-check",
                        "skip",
                        "--json",
                    ]
                ),
                size=size,
            )
            shutil.rmtree(root, ignore_errors=True)
            self._uv_floor("install", files, size)

    def _uv_floor(self, phase: str, files: Path, size: int) -> None:
        """Bare uv (a fresh cache on the same disk) and the recipe's own verify command, as the node runs it."""
        uv = uv_binary()
        venv, cache = self.fresh("uv-venv"), self.fresh("uv-install-cache")
        verify = f"{venv}/bin/python -c {shlex.quote(VERIFY_CODE)} >/dev/null"
        self.timed(
            phase,
            UV_INSTALL,
            self.shell(
                f"{uv} venv {venv} --python {self.python} -q && {uv} pip install --python {venv}/bin/python "
                f"--offline --no-index --find-links {files}/wheels "
                f"-r {files}/requirements.txt -q && {verify}",
                env={**self.env, "UV_CACHE_DIR": str(cache), **ENGINE_ENV},
            ),
            size=size,
        )
        shutil.rmtree(venv, ignore_errors=True)
        shutil.rmtree(cache, ignore_errors=True)
        if phase != "install":
            return
        venv, cache = self.fresh("uv-venv"), self.fresh("uv-install-cache")
        bare = self.work / "requirements-bare.txt"
        bare.write_text(re.sub(r"\s*\\\n\s*--hash=\S+|\s*--hash=\S+", "", (files / "requirements.txt").read_text()))
        self.timed(
            phase,
            UV_BARE,
            self.shell(
                f"{uv} venv {venv} --python {self.python} -q && {uv} pip install --python {venv}/bin/python "
                f"--offline --no-index --find-links {files}/wheels -r {bare} -q",
                env={**self.env, "UV_CACHE_DIR": str(cache)},
            ),
            size=size,
        )
        shutil.rmtree(venv, ignore_errors=True)
        shutil.rmtree(cache, ignore_errors=True)

    # the site path ----------------------------------------------------------------------
    def _store(self) -> Path:
        """A store holding the build (imported once, untimed, when the import phase did not run)."""
        store = self.work / "store"
        if not (store / "builds").is_dir():
            shutil.rmtree(store, ignore_errors=True)
            run(
                [
                    *LOCKBUILD,
                    "import",
                    str(self._need_bundle()),
                    "--trust",
                    str(self.trust),
                    "--store",
                    str(store),
                    "--json",
                ],
                env=self.env,
            )
        return store

    def phase_import(self) -> None:
        bundle = self._need_bundle()
        size = bundle.stat().st_size
        for i in range(self.repeat):
            store = self.fresh("store" if i == self.repeat - 1 else "store-import")
            self.timed(
                "import",
                IMPORT,
                self.run(
                    [*LOCKBUILD, "import", str(bundle), "--trust", str(self.trust), "--store", str(store), "--json"]
                ),
                size=size,
            )
            if i < self.repeat - 1:
                shutil.rmtree(store, ignore_errors=True)
            copy = self.fresh("import-copy")
            self.timed(
                "import",
                IMPORT_FLOOR,
                self.shell(f"openssl dgst -sha256 {bundle} >/dev/null && cp {bundle} {copy}"),
                size=size,
            )
            copy.unlink(missing_ok=True)

    def phase_push_pull(self) -> None:
        sys.path.insert(0, str(HERE.parent / "tests"))
        from registrykit import RealRegistry, binary  # type: ignore[import-not-found, unused-ignore]

        if binary() is None:
            raise StepFailed("push-pull needs docker-registry (CNCF distribution) on PATH; scripts/test installs it.")
        bundle = self._need_bundle()
        size = bundle.stat().st_size
        for _ in range(self.repeat):
            reg = RealRegistry(self.fresh("registry"))
            try:
                ref = reg.ref("engines/vllm", self.tag)
                self.timed(
                    "push-pull",
                    PUSH,
                    self.run([*LOCKBUILD, "push", str(bundle), ref, "--trust", str(self.trust), "--json"]),
                    size=size,
                )
                pulled = self.fresh("store-pulled")
                self.timed(
                    "push-pull",
                    PULL,
                    self.run([*LOCKBUILD, "pull", ref, "--store", str(pulled), "--trust", str(self.trust), "--json"]),
                    size=size,
                )
                shutil.rmtree(pulled, ignore_errors=True)
                raw = self.fresh("raw-pull")
                raw.mkdir()
                cfg = self.work / "curl-pull.cfg"
                digests = _layer_digests(reg.host, "engines/vllm", self.tag)
                cfg.write_text(
                    "".join(
                        f'url = "http://{reg.host}/v2/engines/vllm/blobs/{d}"\noutput = "{raw / d.split(":", 1)[1]}"\n'
                        for d in digests
                    )
                )
                self.timed(
                    "push-pull",
                    RAW_PULL,
                    self.shell(
                        f"curl --parallel --parallel-max 8 --fail -sS -K {cfg} && cd {raw} && "
                        "find . -type f -print0 | xargs -0 openssl dgst -sha256 >/dev/null"
                    ),
                    size=size,
                )
                shutil.rmtree(raw, ignore_errors=True)
            finally:
                reg.close()
                shutil.rmtree(self.work / "registry", ignore_errors=True)

    def phase_push(self) -> None:
        from bench import push as push_phase

        self.r.facts.update(
            push_phase.measure(
                self, LOCKBUILD, self.env, self._need_bundle(), self.trust, self.work / "push", self.repeat
            )
        )

    def phase_install_store(self) -> None:
        store = self._store()
        files = self._files()
        size = sum(p.stat().st_size for p in files.rglob("*") if p.is_file())
        ref = "vllm/" + self.tag
        for _ in range(self.repeat):
            root = self.fresh("root-store")
            self.timed(
                "install-store",
                INSTALL_STORE,
                self.run(
                    [
                        *LOCKBUILD,
                        "install",
                        ref,
                        "--store",
                        str(store),
                        "--root",
                        str(root),
                        "--trust",
                        str(self.trust),
                        "--python",
                        self.python,
                        "--gpu-check",
                        "skip",
                        "--json",
                    ]
                ),
                size=size,
            )
            shutil.rmtree(root, ignore_errors=True)
            self._uv_floor("install-store", files, size)

    def phase_classic(self) -> None:
        """pip download + tar czf + pip install --no-index, of the lock's own files (its requirements.txt,
        pinned with hashes, --no-deps): the same file set as lockbuild's, so the times compare."""
        dl, tgz, venv = self.fresh("classic-dl"), self.fresh("classic-tgz"), self.fresh("classic-venv")
        tgz.mkdir()
        reqs = next((self.work / "lock").glob("*/requirements.txt"))
        # pip takes a wheel only for a platform named exactly: every manylinux tag the build's glibc runs
        level = int(re.search(r"manylinux_2_(\d+)", self.lock_doc["platform"]).group(1))  # type: ignore[union-attr]
        platforms = [f"manylinux_2_{i}_x86_64" for i in range(level, 4, -1)]
        platforms += ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
        self.timed(
            "classic",
            CL_DL,
            self.run(
                [
                    *PIP,
                    "download",
                    "--no-deps",
                    "--require-hashes",
                    "-r",
                    str(reqs),
                    "-d",
                    str(dl),
                    "--index-url",
                    INDEX,
                    "--no-cache-dir",
                    "-q",
                    "--progress-bar",
                    "off",
                    "--only-binary",
                    ":all:",
                    "--python-version",
                    "3.12",
                    *(x for p in platforms for x in ("--platform", p)),
                ]
            ),
        )
        self.timed("classic", CL_TGZ, self.shell(f"tar czf {tgz}/w.tgz -C {dl} ."))
        self.timed(
            "classic",
            CL_INST,
            self.shell(
                f"{self.python} -m venv --without-pip {venv} && {' '.join(PIP)} --python {venv}/bin/python "
                f"install --no-index --find-links {dl} -r {reqs} --no-cache-dir -q"
            ),
        )
        for d in (dl, tgz, venv):
            shutil.rmtree(d, ignore_errors=True)


def _layer_digests(host: str, repo: str, tag: str) -> list[str]:
    """The blobs of a pushed artifact (its layers and config), from the registry's manifest (untimed)."""
    import httpx

    accept = "application/vnd.oci.image.manifest.v1+json"
    doc = httpx.get(f"http://{host}/v2/{repo}/manifests/{tag}", headers={"Accept": accept}, timeout=30).json()
    return [layer["digest"] for layer in doc["layers"]] + [doc["config"]["digest"]]


def main(args: Any, work: Path, keys: tuple[Path, Path], log: Callable[[str], None]) -> Results:
    have = free_gb(HERE / "work")
    if have < NEEDS_GB:
        raise SystemExit(
            f"vllm-live needs about {NEEDS_GB} GB of free disk under {HERE / 'work'} (the cache, the bundles and "
            f"two 9 GB environments); found {have:.1f} GB. Free some space, or run the synthetic workloads."
        )
    phases = tuple(p.strip() for p in (args.phases or ",".join(PHASES)).split(",") if p.strip())
    unknown = [p for p in phases if p not in PHASES]
    if unknown:
        raise SystemExit(f"unknown phase(s) {unknown}; expected some of {', '.join(PHASES)}.")
    version = getattr(args, "live_version", None) or DEFAULT_VERSION
    if version not in TARGETS:
        raise SystemExit(f"--live-version {version}: expected one of {', '.join(TARGETS)} (bench/vllm_live.py).")
    suite = LiveSuite(
        work,
        keys,
        repeat=args.repeat,
        quick=args.quick,
        phases=phases,
        quiet_wait=args.quiet_wait,
        log=log,
        target=TARGETS[version],
    )
    try:
        return suite.run_all()
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run it as bench/run --workload vllm-live")
