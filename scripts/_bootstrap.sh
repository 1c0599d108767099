# Shared by scripts/demo and scripts/test: a virtual environment in .venv, made on a fresh Debian too.
# shellcheck shell=bash
PY=${PYTHON:-python3}
_apt() {
  if [ "$(id -u)" = 0 ]; then apt-get "$@"; elif command -v sudo >/dev/null 2>&1; then sudo apt-get "$@"; else
    echo "lockbuild: need root (or sudo) to run apt-get $*" >&2; return 1; fi
}
apt_install() {
  if command -v apt-get >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    _apt update -qq >/dev/null && _apt install -y -qq "$@" >/dev/null
  else
    echo "lockbuild: please install $* with your package manager" >&2
    return 1
  fi
}
if [ ! -x .venv/bin/python ]; then
  if ! "$PY" -m venv .venv >/dev/null 2>&1; then
    rm -rf .venv
    pyv=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    apt_install "python${pyv}-venv" || apt_install python3-venv
    "$PY" -m venv .venv
  fi
fi
