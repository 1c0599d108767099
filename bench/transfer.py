"""The download's transfer, A/B: lockbuild's Fetcher with httpx, with libcurl (pycurl), and curl's floor.

    python -m bench.transfer [--workload vllm-shape] [--scale 1] [--repeat 3] [--jobs 8]

The workload's files are served by nginx on 127.0.0.1 (C on the server side, so the clients' figures are
their own), over plain HTTP and over HTTPS with a certificate of a private CA made for the run; every
client is given that CA by SSL_CERT_FILE. Each round runs, in turn, `curl --parallel --parallel-max JOBS`
of the same URLs, `python -m bench.steps fetch ... httpx` and `... curl` (the Fetcher: sha256 and size
checked as the bytes arrive, into a fresh content cache), each into an empty directory. Wall and CPU
seconds (user + system of the process and its children, from wait4) are printed per run, then the
medians and the median of the per-round ratios against curl.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.measure import Run, run
from bench.workload import generate

ROOT = Path(__file__).resolve().parent
NGINX = """
worker_processes 2;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log;
daemon off;
events {{ worker_connections 256; }}
http {{
  access_log off;
  sendfile on;
  keepalive_requests 10000;
  client_body_temp_path {tmp}/body;
  proxy_temp_path {tmp}/proxy;
  fastcgi_temp_path {tmp}/fastcgi;
  uwsgi_temp_path {tmp}/uwsgi;
  scgi_temp_path {tmp}/scgi;
  server {{ listen 127.0.0.1:{http}; root {files}; }}
  server {{
    listen 127.0.0.1:{https} ssl;
    ssl_certificate {tmp}/cert.pem;
    ssl_certificate_key {tmp}/key.pem;
    root {files};
  }}
}}
"""


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _certificates(tmp: Path) -> Path:
    """A throw-away CA and a certificate for 127.0.0.1 that it signs; returns the CA's file."""

    def ossl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes")
    ossl(
        *("req", "-x509", *ec, "-keyout", str(tmp / "ca.key"), "-out", str(tmp / "ca.pem"), "-days", "2"),
        *("-subj", "/CN=bench CA", "-addext", "keyUsage=critical,keyCertSign,cRLSign"),
    )
    ossl(
        *("req", "-new", *ec, "-keyout", str(tmp / "key.pem"), "-out", str(tmp / "srv.csr")),
        *("-subj", "/CN=127.0.0.1"),
    )
    ext = tmp / "ext.cnf"
    ext.write_text("subjectAltName=IP:127.0.0.1\nbasicConstraints=critical,CA:FALSE\nextendedKeyUsage=serverAuth\n")
    ossl(
        *("x509", "-req", "-in", str(tmp / "srv.csr"), "-CA", str(tmp / "ca.pem"), "-CAkey", str(tmp / "ca.key")),
        *("-CAcreateserial", "-out", str(tmp / "cert.pem"), "-days", "2", "-extfile", str(ext)),
    )
    return tmp / "ca.pem"


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.transfer")
    ap.add_argument("--workload", default="vllm-shape")
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=8)
    ap.add_argument("--protocols", default="https,http")
    ap.add_argument("--variants", default="curl,httpx,pycurl")
    args = ap.parse_args(argv)
    wl = generate(args.workload, args.scale, ROOT / "work")
    files_dir = wl.root / "files"
    total = sum(f.size for f in wl.files)
    tmp = Path(tempfile.mkdtemp(prefix="bench-transfer-", dir=ROOT / "work"))
    ca = _certificates(tmp)
    ports = {"http": _port(), "https": _port()}
    (tmp / "nginx.conf").write_text(NGINX.format(tmp=tmp, files=files_dir, **ports))
    server = subprocess.Popen(
        ["nginx", "-p", str(tmp), "-c", str(tmp / "nginx.conf")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    env = {**os.environ, "SSL_CERT_FILE": str(ca), "PYTHONPATH": str(ROOT.parent)}
    try:
        time.sleep(1.0)
        table: dict[tuple[str, str], list[Run]] = {}
        for proto in args.protocols.split(","):
            base = f"{proto}://127.0.0.1:{ports[proto]}/"
            wanted = [
                {"url": base + f.filename, "sha256": f.sha256, "size": f.size, "label": f.filename} for f in wl.files
            ]
            (tmp / f"wanted-{proto}.json").write_text(json.dumps(wanted))
            for i in range(args.repeat):
                for variant in args.variants.split(","):
                    out = tmp / "out"
                    shutil.rmtree(out, ignore_errors=True)
                    out.mkdir()
                    if variant == "curl":
                        cfg = tmp / "curl.cfg"
                        cfg.write_text("".join(f'url = "{w["url"]}"\noutput = "{out / w["label"]}"\n' for w in wanted))
                        argv_ = ["curl", "--parallel", "--parallel-max", str(args.jobs), "--fail", "-sS"]
                        argv_ += ["--cacert", str(ca), "-K", str(cfg)]
                    else:
                        transfer = "curl" if variant == "pycurl" else "httpx"
                        argv_ = [sys.executable, "-m", "bench.steps", "fetch", str(tmp / f"wanted-{proto}.json")]
                        argv_ += [str(out / "cache"), str(args.jobs), transfer]
                    r = run(argv_, env=env, cwd=ROOT.parent)
                    table.setdefault((proto, variant), []).append(r)
                    print(f"{proto} {variant} run {i + 1}: {r.seconds:.2f} s wall, {r.cpu_s:.2f} CPU-s", flush=True)
        print(f"\n{len(wl.files)} files, {total / 1e9:.3f} GB, {args.jobs} at once; medians of {args.repeat}")
        print("| protocol | transfer | wall s | CPU s | wall / curl | CPU / curl |")
        print("|---|---|---:|---:|---:|---:|")
        for (proto, variant), runs in table.items():
            floor = table.get((proto, "curl"), runs)
            ratio_w = statistics.median(r.seconds / c.seconds for r, c in zip(runs, floor, strict=False))
            ratio_c = statistics.median(r.cpu_s / max(c.cpu_s, 1e-9) for r, c in zip(runs, floor, strict=False))
            print(
                f"| {proto} | {variant} | {statistics.median(r.seconds for r in runs):.2f} | "
                f"{statistics.median(r.cpu_s for r in runs):.2f} | {ratio_w:.2f} | {ratio_c:.2f} |"
            )
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
