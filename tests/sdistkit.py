"""sdists whose build needs a backend from the index (``requires = ["toybackend"]``), and that backend."""

from __future__ import annotations

from servers import make_tar_gz, make_wheel

BACKEND = '''\
"""A tiny PEP 517 backend: the sdist's package directory and PKG-INFO become a py3-none-any wheel."""
import base64, hashlib, os, zipfile


def _meta():
    with open("PKG-INFO", encoding="utf-8") as f:
        fields = dict(line.split(": ", 1) for line in f.read().splitlines() if ": " in line)
    return fields["Name"], fields["Version"]


def get_requires_for_build_wheel(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name, version = _meta()
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    files = {}
    for top, dirs, names in os.walk(dist):
        dirs.sort()
        for n in sorted(names):
            path = os.path.join(top, n)
            with open(path, "rb") as f:
                files[path.replace(os.sep, "/")] = f.read()
    files[info + "/METADATA"] = f"Metadata-Version: 2.1\\nName: {name}\\nVersion: {version}\\n".encode()
    if os.path.exists("NET_PROBE"):  # the build says whether it could reach HOST:PORT
        import socket

        host, port = open("NET_PROBE").read().split(":")
        try:
            socket.create_connection((host, int(port)), timeout=3).close()
            files[f"{dist}/net.txt"] = b"reached"
        except OSError:
            files[f"{dist}/net.txt"] = b"unreachable"
    tag = open("WHEEL_TAG").read().strip() if os.path.exists("WHEEL_TAG") else "py3-none-any"
    files[info + "/WHEEL"] = f"Wheel-Version: 1.0\\nGenerator: toybackend\\nRoot-Is-Purelib: true\\nTag: {tag}\\n".encode()
    files[info + "/entry_points.txt"] = f"[console_scripts]\\n{name} = {dist}:main\\n".encode()
    record = ""
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record += f"{path},sha256={digest},{len(data)}\\n"
    files[info + "/RECORD"] = (record + info + "/RECORD,,\\n").encode()
    filename = f"{dist}-{version}-{tag}.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, filename), "w") as z:
        for path, data in files.items():
            zi = zipfile.ZipInfo(path, (1980, 1, 1, 0, 0, 0))
            zi.external_attr = 0o644 << 16
            z.writestr(zi, data)
    return filename
'''


def backend_wheel(version: str = "1.0") -> tuple[str, bytes]:
    return make_wheel("toybackend", version, modules={"toybackend/__init__.py": BACKEND})


def sdist_needing_backend(
    name: str, version: str, requires: str = '["toybackend"]', tag: str | None = None, net_probe: str | None = None
) -> tuple[str, bytes]:
    dist = name.replace("-", "_")
    pyproject = f'[build-system]\nrequires = {requires}\nbuild-backend = "toybackend"\n'.encode()
    module = f"def main():\n    print('{name} {version}')\n".encode()
    return f"{dist}-{version}.tar.gz", make_tar_gz(
        {
            f"{dist}-{version}/PKG-INFO": f"Metadata-Version: 2.2\nName: {name}\nVersion: {version}\n".encode(),
            f"{dist}-{version}/pyproject.toml": pyproject,
            f"{dist}-{version}/{dist}/__init__.py": module,
            **({f"{dist}-{version}/WHEEL_TAG": tag.encode()} if tag else {}),
            **({f"{dist}-{version}/NET_PROBE": net_probe.encode()} if net_probe else {}),
        }
    )
