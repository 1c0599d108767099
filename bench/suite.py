"""The benchmark's phases: lock, fetch, pack and sign, verify, install, and the whole pipeline, each
measured for lockbuild and for its baselines, back to back, ``repeat`` times, on the same files.

Every command runs as a subprocess with an environment that no user or machine configuration reaches
(no PIP_*/UV_* variables, no pip.conf or uv.toml), and with cold caches unless a phase says warm.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bench import floor as stock_floor
from bench import push as push_phase
from bench.index import StaticIndex
from bench.measure import Figure, Ratio, Run, StepFailed, pairwise, run, wait_quiet
from lockbuild.proc.uvtool import uv_binary

DEAD = "http://127.0.0.1:9"
PHASES = ("lock", "fetch", "pack", "verify", "install", "install-store", "pipeline", "floor", "verify-pass", "push")
PIP = [sys.executable, "-m", "pip"]
LOCKBUILD = [sys.executable, "-m", "bench.lbrun"]  # the lockbuild CLI, reporting its own peak RSS
VERIFY = "lockbuild verify (signature + every digest)"
OPENSSL = "openssl dgst -sha256 (one sha256 pass)"
INSTALL = "lockbuild install (verify + unpack + uv + checks)"
INSTALL_STORE = "lockbuild install --store (blobs linked)"
UV_HASHED = "uv venv + uv pip install --offline, hashed lock + verify command (floor)"
UV_BARE = "uv venv + uv pip install --offline, no hashes + verify command"
NEEDED = ("lock", "fetch", "pack")  # every later phase needs the lock, the fetched files and the bundle
_DROP = ("PIP_", "UV_", "VIRTUAL_ENV", "CONDA_", "PYTHONPATH", "PYTHONHOME", "PYTHONDONTWRITEBYTECODE", "LOCKBUILD_")


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_DROP)}
    env.update(
        {
            "PIP_CONFIG_FILE": os.devnull,
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "UV_NO_CONFIG": "1",
            "UV_PYTHON_DOWNLOADS": "never",
            "NO_COLOR": "1",
        }
    )
    env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent)  # so `python -m bench.steps` works anywhere
    return env


@dataclass(frozen=True)
class Setup:
    label: str  # workload key, e.g. "vllm-shape-1gb"
    work: Path  # scratch directory of this workload's run
    index_url: str
    server: StaticIndex | None  # None for the live workload
    recipe: Path
    requirement: str  # what the classic path asks pip for
    check: tuple[str, ...]  # run inside each installed environment (path relative to it): proves it works
    python: str  # the node's interpreter
    secret: Path
    trust: Path
    repeat: int
    jobs: int = 8
    quick: bool = False  # skip the slow classic baselines (pip, tar czf)
    quiet_wait: float = 20.0  # before each command, wait up to this long for the other processes to calm down
    phases: tuple[str, ...] = ()  # the phases to measure (empty: all but push and install-store); lock, fetch and
    # pack run unmeasured if left out


@dataclass
class Results:
    label: str
    figures: dict[tuple[str, str], Figure] = field(default_factory=dict)
    ratios: list[Ratio] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)

    def fig(self, phase: str, variant: str) -> Figure:
        return self.figures.setdefault((phase, variant), Figure(phase, variant))

    def get(self, phase: str, variant: str) -> Figure | None:
        f = self.figures.get((phase, variant))
        return f if f is not None and f.seconds else None

    def to_json(self) -> dict[str, Any]:
        return {
            "workload": self.label,
            "facts": self.facts,
            "figures": [f.to_json() for f in self.figures.values()],
            "ratios": [r.to_json() for r in self.ratios],
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Results:
        """A saved run, read back (ratios recomputed from the figures)."""
        r = cls(doc["workload"], facts=doc["facts"])
        for f in doc["figures"]:
            fig = r.fig(f["phase"], f["variant"])
            fig.seconds, fig.bytes = list(f["seconds"]), int(f["bytes"])
            fig.rss_kb = [round(m * 1024) for m in f["rss_mb"]]
            fig.cpu_s, fig.contention = list(f["cpu_s"]), list(f["others_busy_cpus"])
            fig.self_rss_kb = [round(m * 1024) for m in f.get("self_rss_mb", [0] * len(fig.seconds))]
        if r.label.startswith("vllm-live"):
            from bench.vllm_live import ratios as live_ratios

            r.ratios = live_ratios(r)
        else:
            r.ratios = ratios(r)
        return r


def _fresh(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


class Suite:
    def __init__(self, setup: Setup, log: Callable[[str], None]) -> None:
        self.s = setup
        self.r = Results(setup.label)
        self.log = log
        self.env = clean_env()
        self.lock_doc: dict[str, Any] = {}
        self.lock_dir = setup.work / "lock"
        self.cache = setup.work / "cache"  # the warm cache, once the fetch phase has filled it
        self.fetched = setup.work / "fetched"  # the unpacked files (lockbuild fetch --out)
        self.unpacked = self.fetched
        self.bundle: Path | None = None

    # helpers -----------------------------------------------------------------------------------
    def lb_env(self, cache: Path) -> dict[str, str]:
        env = dict(self.env)
        env.update(
            {
                "LOCKBUILD_INDEX_URL": self.s.index_url,
                "LOCKBUILD_CACHE_DIR": str(cache),
                "LOCKBUILD_GITHUB_API": f"{DEAD}/api",
                "LOCKBUILD_GITHUB_DOWNLOAD": f"{DEAD}/gh",
                "LOCKBUILD_OSV_URL": "none",  # no vulnerability service: the timings are today's
            }
        )
        return env

    def uv_env(self, cache: Path) -> dict[str, str]:
        return {**self.env, "UV_CACHE_DIR": str(cache)}

    def run(self, argv: Sequence[str], *, env: dict[str, str] | None = None, stdin: str | None = None) -> Run:
        """Run one measured command, once the rest of the machine is quiet (or ``quiet_wait`` has passed)."""
        wait_quiet(max_wait=self.s.quiet_wait)
        return run(argv, env=env or self.env, stdin=stdin)

    def shell(self, script: str, *, env: dict[str, str] | None = None) -> Run:
        return self.run(["bash", "-o", "pipefail", "-ec", script], env=env)

    def timed(self, phase: str, variant: str, r: Run, *, seconds: float | None = None, size: int = 0) -> Run:
        f = self.r.fig(phase, variant)
        f.add(
            r.seconds if seconds is None else seconds,
            r.max_rss_kb,
            r.cpu_s,
            r.others_cpu_s / max(r.seconds, 1e-9),
            r.self_rss_kb,
        )
        if size:
            f.bytes = size
        return r

    def rep_dir(self, i: int, name: str) -> Path:
        return _fresh(self.s.work / f"rep{i}" / name)

    def clean_rep(self, i: int) -> None:
        shutil.rmtree(self.s.work / f"rep{i}", ignore_errors=True)

    def check_env(self, env_dir: Path, what: str) -> None:
        """The installed engine works (not timed): each variant must really have installed it."""
        argv = [str(env_dir / self.s.check[0]), *self.s.check[1:]]
        try:
            run(argv, env=self.env)
        except StepFailed as exc:
            raise StepFailed(f"{what} did not give a working environment at {env_dir}: {exc}") from None

    def check_count(self, out: Path, expected: int, what: str) -> None:
        got = sum(1 for p in out.rglob("*") if p.is_file())
        if got != expected:
            raise StepFailed(f"{what} left {got} files in {out}; expected the lock's {expected}.")

    def step(self, *args: str | Path) -> list[str]:
        return [sys.executable, "-m", "bench.steps", *map(str, args)]

    def counters(self) -> tuple[int, int]:
        return self.s.server.counters() if self.s.server else (0, 0)

    # the phases --------------------------------------------------------------------------------
    def run_all(self) -> Results:
        chosen = set(self.s.phases)
        for name, phase in (
            ("lock", self.phase_lock),
            ("fetch", self.phase_fetch),
            ("pack", self.phase_pack),
            ("verify", self.phase_verify),
            ("install", self.phase_install),
            ("install-store", self.phase_install_store),
            ("pipeline", self.phase_pipeline),
            ("floor", lambda: stock_floor.phase_floor(self)),
            ("verify-pass", lambda: stock_floor.phase_sha_pass(self)),
            ("push", self.phase_push),
        ):
            if chosen and name not in chosen:
                if name in NEEDED:  # what the chosen phases stand on, made once and not measured
                    self.log(f"[{self.s.label}] {name} (once, not measured)")
                    repeat, self.s = self.s.repeat, replace(self.s, repeat=1)
                    phase()
                    self.s = replace(self.s, repeat=repeat)
                    self.r.figures = {k: v for k, v in self.r.figures.items() if k[0] != name}
                continue
            if name in ("install-store", "push") and not chosen:
                continue  # only when asked: each imports the bundle into a store first
            self.log(f"[{self.s.label}] {name}")
            phase()
        self.r.ratios = ratios(self.r) + stock_floor.ratios(self.r.figures)
        return self.r

    def phase_push(self) -> None:
        """lockbuild push against a raw parallel upload of the same blobs (bench/push.py)."""
        if self.bundle is None:  # the pack phase did not run: the bundle built once, untimed
            out = _fresh(self.s.work / "bundle")
            run(
                [*LOCKBUILD, "build", str(self.s.recipe), "--key", str(self.s.secret), "--out", str(out), "--json"],
                env=self.lb_env(_fresh(self.s.work / "build-cache")),
            )
            self.bundle = next(out.glob("*.lbz"))
        facts = push_phase.measure(
            self, LOCKBUILD, self.env, self.bundle, self.s.trust, self.s.work / "push", self.s.repeat
        )
        self.r.facts.update(facts)

    def phase_lock(self) -> None:
        for i in range(self.s.repeat):
            out = self.rep_dir(i, "lock")
            r = self.run(
                [*LOCKBUILD, "lock", str(self.s.recipe), "--out", str(out), "--json"],
                env=self.lb_env(self.rep_dir(i, "lock-cache")),
            )
            self.timed("lock", "lockbuild lock", r)
            doc = json.loads(r.stdout)["locks"][0]
            argv = [
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
                self.s.index_url,
                "--generate-hashes",
                "--no-header",
                "--quiet",
                "--output-file",
                str(out / "uv-requirements.txt"),
            ]
            self.timed(
                "lock",
                "uv pip compile --generate-hashes",
                self.run(argv, env=self.uv_env(self.rep_dir(i, "uv-cache")), stdin=self.s.requirement + "\n"),
            )
            if i == self.s.repeat - 1:
                self.lock_doc = doc
                _fresh(self.lock_dir)
                shutil.copytree(out / os.listdir(out)[0], self.lock_dir)
                self.r.facts.update({"packages": len(doc["packages"]), "as_of": doc["as_of"]})
            self.clean_rep(i)

    def _inputs(self) -> tuple[Path, Path, Path, Path, int]:
        """wanted.json (lockbuild), files.json (raw), curl.cfg template, pip requirements; total bytes."""
        sizes = self.s.server.sizes if self.s.server else {}
        wanted: list[dict[str, Any]] = []
        for p in self.lock_doc["packages"]:
            wanted.append({"url": p["url"], "sha256": p["sha256"], "size": p["size"], "label": p["file"]})
        for e in self.lock_doc["extras"]:
            name = e["path"].rsplit("/", 1)[-1]
            wanted.append({"url": e["url"], "sha256": e["sha256"], "size": sizes.get(name), "label": name})
        base = self.s.work
        (base / "wanted.json").write_text(json.dumps(wanted))
        files = [{"url": w["url"], "name": w["label"], "size": w["size"] or 0} for w in wanted]
        (base / "files.json").write_text(json.dumps(files))
        lock_txt = (self.lock_dir / "requirements.txt").read_text()
        tools = [e for e in self.lock_doc["extras"] if e["kind"] == "tool"]
        extra = "".join(f"uv @ {t['url']} --hash=sha256:{t['sha256']}\n" for t in tools)
        (base / "pip-download.txt").write_text(lock_txt + extra)
        total = sum(int(w["size"] or 0) for w in wanted)
        return base / "wanted.json", base / "files.json", base / "curl.cfg", base / "pip-download.txt", total

    def phase_fetch(self) -> None:
        wanted, files, curl_cfg, pip_req, total = self._inputs()
        jobs = str(self.s.jobs)
        for i in range(self.s.repeat):
            out = self.rep_dir(i, "raw")
            r = self.run(self.step("raw", files, out, jobs), env=self.env)
            got = json.loads(r.stdout)
            total = int(got["bytes"])  # what the lock's files really weigh (the live index may not list every size)
            count = len(json.loads(files.read_text()))
            self.check_count(out, count, "the raw httpx transfer")
            self.timed("fetch", "raw parallel GET (httpx, in-process)", r, seconds=got["seconds"], size=got["bytes"])
            out = self.rep_dir(i, "curl")
            out.mkdir()
            cfg = "".join(f'url = "{f["url"]}"\noutput = "{out / f["name"]}"\n' for f in json.loads(files.read_text()))
            curl_cfg.write_text(cfg)
            self.timed(
                "fetch",
                "raw parallel GET (curl --parallel)",
                self.run(
                    ["curl", "--parallel", "--parallel-max", jobs, "--fail", "-sS", "-K", str(curl_cfg)], env=self.env
                ),
                size=total,
            )
            self.check_count(out, count, "curl")
            cache = self.rep_dir(i, "cache")
            r = self.run(self.step("fetch", wanted, cache, jobs), env=self.lb_env(cache))
            got = json.loads(r.stdout)
            if got["downloaded_bytes"] != total:
                raise StepFailed(
                    f"lockbuild fetched {got['downloaded_bytes']} bytes into a cold cache; expected {total}."
                )
            self.timed("fetch", "lockbuild fetch (transfer, in-process)", r, seconds=got["seconds"], size=total)
            self.timed("fetch", "lockbuild fetch (whole process)", r, size=total)
            if not self.s.quick:
                out = self.rep_dir(i, "pip")
                self.timed(
                    "fetch",
                    "pip download --no-deps --require-hashes",
                    self.run(
                        [
                            *PIP,
                            "download",
                            "--no-deps",
                            "--require-hashes",
                            "-r",
                            str(pip_req),
                            "-d",
                            str(out),
                            "--index-url",
                            self.s.index_url,
                            "--no-cache-dir",
                            "-q",
                            "--progress-bar",
                            "off",
                        ],
                        env=self.env,
                    ),
                    size=total,
                )
                self.check_count(out, count, "pip download")
            if i == self.s.repeat - 1:
                _fresh(self.cache)
                os.rename(cache, self.cache)
            self.clean_rep(i)
        count = len(json.loads(files.read_text()))
        self.r.facts.update({"fetch_bytes": total, "fetch_files": count, "jobs": self.s.jobs})
        for _ in range(self.s.repeat):
            before = self.counters()
            r = self.run(self.step("fetch", wanted, self.cache, jobs), env=self.lb_env(self.cache))
            got = json.loads(r.stdout)
            after = self.counters()
            self.timed("fetch", "lockbuild fetch, warm cache (re-hash only)", r, seconds=got["seconds"], size=total)
            seen = self.s.server is not None  # the live index's traffic is not ours to count
            self.r.facts["warm_rebuild"] = {
                "downloaded_bytes": got["downloaded_bytes"],
                "cached": got["cached"],
                "files": got["files"],
                "server_file_gets": after[0] - before[0] if seen else None,
                "server_bytes": after[1] - before[1] if seen else None,
            }
        r = self.run(
            [*LOCKBUILD, "fetch", str(self.s.recipe), "--out", str(_fresh(self.fetched)), "--json"],
            env=self.lb_env(self.cache),
        )
        build = json.loads(r.stdout)["fetches"][0]["build"]
        self.unpacked = self.fetched / build

    def phase_pack(self) -> None:
        src = self.unpacked
        for i in range(self.s.repeat):
            out = self.rep_dir(i, "bundle")
            r = self.run(self.step("pack", self.s.recipe, self.cache, self.s.secret, out), env=self.lb_env(self.cache))
            got = json.loads(r.stdout)
            self.timed("pack", "lockbuild pack + sign", r, seconds=got["pack_s"], size=got["unpacked"])
            self.r.facts["bundle_bytes"] = got["size"]
            self.r.facts["unpacked_bytes"] = got["unpacked"]
            tar = self.rep_dir(i, "tar")
            tar.mkdir()
            self.timed(
                "pack",
                "tar cf - | zstd -T0 -3",
                self.shell(f"tar cf - -C {src} . | zstd -T0 -3 -q -o {tar / 'b.tar.zst'}", env=self.env),
                size=got["unpacked"],
            )
            if not self.s.quick:
                self.timed(
                    "pack",
                    "tar czf",
                    self.shell(f"tar czf {tar / 'b.tgz'} -C {src} .", env=self.env),
                    size=got["unpacked"],
                )
            if i == self.s.repeat - 1:
                final = self.s.work / "bundle"
                _fresh(final)
                os.rename(out, final)
                self.bundle = final / Path(got["bundle"]).name
            self.clean_rep(i)

    def phase_verify(self) -> None:
        assert self.bundle is not None
        size = self.bundle.stat().st_size
        for _ in range(self.s.repeat):
            self.timed(
                "verify",
                VERIFY,
                self.run(
                    [*LOCKBUILD, "verify", str(self.bundle), "--trust", str(self.s.trust), "--json"], env=self.env
                ),
                size=size,
            )
            self.timed("verify", OPENSSL, self.run(["openssl", "dgst", "-sha256", str(self.bundle)]), size=size)
            self.timed(
                "verify",
                "zstd -t (decompress + checksum only)",
                self.run(["zstd", "-t", "-q", str(self.bundle)], env=self.env),
                size=size,
            )

    def _install_lb(self, source: str, root: Path, *, store: Path | None = None, check: bool = False) -> Run:
        where = ["--store", str(store)] if store is not None else []
        r = self.run(
            [
                *LOCKBUILD,
                "install",
                source,
                *where,
                "--root",
                str(root),
                "--trust",
                str(self.s.trust),
                "--python",
                self.s.python,
                "--gpu-check",
                "skip",
                "--json",
            ],
            env=self.env,
        )
        if check:
            self.check_env(Path(json.loads(r.stdout)["path"]), "lockbuild install")
        return r

    def _bundle_lock(self) -> tuple[Path, Path]:
        """The bundle's own files, unpacked once (not timed): its wheels and its hashed lock/requirements.txt."""
        assert self.bundle is not None
        out = self.s.work / "bundle-unpacked"
        if not (out / "lock" / "requirements.txt").is_file():
            _fresh(out).mkdir()
            run(["bash", "-ec", f"zstd -dc {self.bundle} | tar xf - -C {out}"], env=self.env)
        return out / "wheels", out / "lock" / "requirements.txt"

    def _uv_floors(self, phase: str, i: int, size: int) -> None:
        """uv alone doing the node's work: ``uv venv``, ``uv pip install --offline --no-index`` of the bundle's
        hashed lock (uv checks every hash), then the recipe's verify command; and the same wheels with no hashes."""
        wheels, lock = self._bundle_lock()
        uv = uv_binary()
        verify = f"{{venv}}/{' '.join(self.s.check)}"
        for variant, req in ((UV_HASHED, f"-r {lock}"), (UV_BARE, f"-r {self._unhashed(lock)}")):
            venv, cache = self.rep_dir(i, "uv-venv"), self.rep_dir(i, "uv-cache")
            self.timed(
                phase,
                variant,
                self.shell(
                    f"{uv} venv {venv} --python {self.s.python} -q && {uv} pip install --python {venv}/bin/python "
                    f"--offline --no-index --find-links {wheels} {req} -q && {verify.format(venv=venv)} >/dev/null",
                    env=self.uv_env(cache),
                ),
                size=size,
            )
            if i == 0:
                self.check_env(venv, variant)
            shutil.rmtree(venv, ignore_errors=True)
            shutil.rmtree(cache, ignore_errors=True)

    def _unhashed(self, lock: Path) -> Path:
        """The lock's requirements without their hashes (one ``name==version`` a line)."""
        out = self.s.work / "requirements-unhashed.txt"
        lines = [ln.split(" ")[0] for ln in lock.read_text().splitlines() if ln and not ln.startswith((" ", "#", "-"))]
        out.write_text("".join(f"{ln}\n" for ln in lines))
        return out

    def phase_install(self) -> None:
        assert self.bundle is not None
        wheels, lock = self.unpacked / "wheels", self.unpacked / "requirements.txt"
        size = self.r.facts["unpacked_bytes"]
        for i in range(self.s.repeat):
            self.timed(
                "install",
                INSTALL,
                self._install_lb(str(self.bundle), self.rep_dir(i, "root"), check=i == 0),
                size=size,
            )
            self._uv_floors("install", i, size)
            if not self.s.quick:
                venv = self.rep_dir(i, "pip-venv")
                self.timed(
                    "install",
                    "venv + pip install --no-index --find-links",
                    self.shell(
                        f"{self.s.python} -m venv --without-pip {venv} && {' '.join(PIP)} --python {venv}/bin/python "
                        f"install --no-index --find-links {wheels} -r {lock} --no-cache-dir -q",
                        env=self.env,
                    ),
                    size=size,
                )
                if i == 0:
                    self.check_env(venv, "pip install")
            self.clean_rep(i)

    def phase_install_store(self) -> None:
        assert self.bundle is not None
        store = self.s.work / "store"
        if not (store / "builds").is_dir():
            _fresh(store)
            run([*LOCKBUILD, "import", str(self.bundle), "--trust", str(self.s.trust), "--store", str(store)])
        size = self.r.facts["unpacked_bytes"]
        ref = f"{self.s.requirement.split('==')[0]}/{self.s.requirement.split('==')[1]}-cpu"
        for i in range(self.s.repeat):
            self.timed(
                "install-store",
                INSTALL_STORE,
                self._install_lb(ref, self.rep_dir(i, "root"), store=store, check=i == 0),
                size=size,
            )
            self._uv_floors("install-store", i, size)
            self.clean_rep(i)

    def phase_pipeline(self) -> None:
        req = self.s.requirement
        for i in range(self.s.repeat):
            cache, out = self.rep_dir(i, "cache"), self.rep_dir(i, "dist")
            build = self.run(
                [*LOCKBUILD, "build", str(self.s.recipe), "--key", str(self.s.secret), "--out", str(out), "--json"],
                env=self.lb_env(cache),
            )
            bundle = Path(json.loads(build.stdout)["bundles"][0]["bundle"])
            inst = self._install_lb(str(bundle), self.rep_dir(i, "root"), check=i == 0)
            self.timed("pipeline", "lockbuild build (cold cache)", build)
            self.timed("pipeline", "lockbuild install", inst)
            self.r.fig("pipeline", "lockbuild: recipe -> installed").add(
                build.seconds + inst.seconds,
                max(build.max_rss_kb, inst.max_rss_kb),
                build.cpu_s + inst.cpu_s,
                (build.others_cpu_s + inst.others_cpu_s) / (build.seconds + inst.seconds),
                max(build.self_rss_kb, inst.self_rss_kb),
            )
            self.clean_rep(i)
            if self.s.quick:
                continue
            dl, tgz, node, venv = (self.rep_dir(i, n) for n in ("dl", "tgz", "node", "venv"))
            parts = [
                (
                    "classic: pip download",
                    [
                        *PIP,
                        "download",
                        req,
                        "-d",
                        str(dl),
                        "--index-url",
                        self.s.index_url,
                        "--no-cache-dir",
                        "-q",
                        "--progress-bar",
                        "off",
                    ],
                ),
                ("classic: tar czf", ["bash", "-ec", f"mkdir -p {tgz} && tar czf {tgz}/w.tgz -C {dl} ."]),
                ("classic: tar xzf", ["bash", "-ec", f"mkdir -p {node} && tar xzf {tgz}/w.tgz -C {node}"]),
                (
                    "classic: venv + pip install --no-index",
                    [
                        "bash",
                        "-ec",
                        f"{self.s.python} -m venv --without-pip {venv} && {' '.join(PIP)} --python {venv}/bin/python "
                        f"install --no-index --find-links {node} '{req}' --no-cache-dir -q",
                    ],
                ),
            ]
            total = cpu = others = 0.0
            rss = 0
            for name, argv in parts:
                r = self.run(argv)
                self.timed("pipeline", name, r)
                total, cpu, others = total + r.seconds, cpu + r.cpu_s, others + r.others_cpu_s
                rss = max(rss, r.max_rss_kb)
            self.r.fig("pipeline", "classic: requirement -> installed").add(total, rss, cpu, others / total)
            if i == 0:
                self.check_env(venv, "the classic path")
            self.clean_rep(i)


# ratios and targets ------------------------------------------------------------------------------
def ratios(r: Results) -> list[Ratio]:
    out: list[Ratio] = []

    def add(
        name: str,
        a: tuple[str, str],
        b: Sequence[tuple[str, str]],
        target: str,
        ok: Callable[[float], bool],
        invert: bool = False,
    ) -> None:
        fa = r.get(*a)
        fb = [f for f in (r.get(*x) for x in b) if f is not None]
        if fa is None or not fb:
            return
        vals = pairwise(fb[0], fa) if invert else pairwise(fa, fb)
        out.append(Ratio(name, vals, target, ok(sorted(vals)[len(vals) // 2])))

    f = "fetch"
    for floor in ("raw parallel GET (httpx, in-process)", "raw parallel GET (curl --parallel)"):
        add(
            f"fetch / {floor.split(' (')[1].split(',')[0].rstrip(')')} raw transfer",
            (f, "lockbuild fetch (transfer, in-process)"),
            [(f, floor)],
            "<= 1.3",
            lambda v: v <= 1.3,
        )
    add(
        "pip download / lockbuild fetch",
        (f, "lockbuild fetch (whole process)"),
        [(f, "pip download --no-deps --require-hashes")],
        ">= 5",
        lambda v: v >= 5,
        invert=True,
    )
    add(
        "lock / uv pip compile",
        ("lock", "lockbuild lock"),
        [("lock", "uv pip compile --generate-hashes")],
        "(none)",
        lambda v: True,
    )
    add(
        "pack+sign / tar|zstd -T0 -3",
        ("pack", "lockbuild pack + sign"),
        [("pack", "tar cf - | zstd -T0 -3")],
        "<= 1.5",
        lambda v: v <= 1.5,
    )
    add("pack+sign / tar czf", ("pack", "lockbuild pack + sign"), [("pack", "tar czf")], "(none)", lambda v: True)
    for phase, lb, target in (("install", INSTALL, 1.1), ("install-store", INSTALL_STORE, 1.0)):
        for floor, what in ((UV_HASHED, "uv, hashed lock"), (UV_BARE, "uv, no hashes")):
            hashed = floor == UV_HASHED
            add(
                f"{phase} / {what} (+ verify command)",
                (phase, lb),
                [(phase, floor)],
                f"<= {target}" if hashed else "(none)",
                (lambda v, t=target: v <= t) if hashed else (lambda v: True),
            )
    add("verify / openssl dgst -sha256", ("verify", VERIFY), [("verify", OPENSSL)], "<= 1.0", lambda v: v <= 1.0)
    add(
        "pip install / lockbuild install",
        ("install", INSTALL),
        [("install", "venv + pip install --no-index --find-links")],
        ">= 10",
        lambda v: v >= 10,
        invert=True,
    )
    add(
        "classic / lockbuild, recipe -> installed",
        ("pipeline", "lockbuild: recipe -> installed"),
        [("pipeline", "classic: requirement -> installed")],
        ">= 5",
        lambda v: v >= 5,
        invert=True,
    )
    v = r.get("verify", "lockbuild verify (signature + every digest)")
    if v is not None:
        mbs = tuple(v.bytes / s / 1e6 for s in v.seconds)
        out.append(Ratio("verify throughput, MB/s of bundle", mbs, ">= 300", sorted(mbs)[len(mbs) // 2] >= 300))
    out += push_phase.ratios(r.get)
    return out
