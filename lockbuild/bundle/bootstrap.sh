#!/bin/sh
# lockbuild's bootstrap: install the lockbuild this bundle carries at TARGET, with stock tools only.
#
# It is a signed member of lockbuild's own bundle. Run it only from an extraction of a .lbz whose
# signature minisign accepted first:
#
#   minisign -Vm lockbuild-VERSION-VARIANT-PLATFORM.lbz -p release.pub
#   mkdir DIR && zstd -dc lockbuild-VERSION-VARIANT-PLATFORM.lbz | tar -x -C DIR
#   sh DIR/bootstrap.sh /opt/lockbuild [--python /path/to/pythonX.Y]
#
# What it does, with no network and no Python beyond the bundle's (or the one given):
#   0. refuses an extraction (or a --python) that another user could swap: any directory above it, up to
#      /, must be owned by root or you and writable by no one else unless sticky (the rule lockbuild
#      holds --root to; for the interpreter, on every link of its way too, and the file itself, as the
#      installer's --python: lockbuild/fsio/owners.py::program_problem); then copies the extraction into a 0700 staging directory it makes beside
#      TARGET and reads nothing of DIR again: every check and every step below works on that copy;
#   1. checks every copied member against SHA256SUMS, the signed list the builder wrote;
#   2. unpacks the bundled interpreter (or takes --python) and the bundled uv, in a staging directory
#      beside TARGET;
#   3. installs the lock with uv --offline --no-index --require-hashes from the bundle's wheels only;
#   4. runs lockbuild --version from the staging directory;
#   5. renames the staging directory to TARGET (one rename: TARGET appears whole or not at all).
# A failure at any step removes the staging directory and leaves nothing behind. It writes nothing
# outside TARGET's staging directory (uv's cache lives there too and is removed).
#
# TARGET then holds bin/lockbuild (the command to run or link to: ln -s TARGET/bin/lockbuild
# /usr/local/bin/lockbuild), env/ (the interpreter or environment with lockbuild installed) and
# lockbuild.json (what was installed). Later versions install like any engine:
#   TARGET/bin/lockbuild install lockbuild-NEW.lbz --root /opt/lockbuild-engines
set -eu
umask 022

# Filled in by the builder; the whole script is signed with the bundle.
LOCKBUILD_VERSION='@VERSION@'
PYTHON_VERSION='@PYTHON@'
INTERPRETER='@INTERPRETER@'
UV_WHEEL='@UV@'
BUNDLE='@BUNDLE@'

say() { printf 'bootstrap: %s\n' "$*" >&2; }
die() {
  printf 'bootstrap: ERROR %s\n' "$1" >&2
  if [ $# -gt 1 ]; then printf 'bootstrap: TIP %s\n' "$2" >&2; fi
  exit 1
}
usage() {
  printf 'usage: sh bootstrap.sh TARGET [--python /path/to/python%s]\n' "$PYTHON_VERSION" >&2
  printf '  installs lockbuild %s at TARGET (an absolute path that does not exist yet)\n' "$LOCKBUILD_VERSION" >&2
  exit 2
}

[ $# -ge 1 ] || usage
case $1 in -h|--help) usage ;; esac
target=$1
shift
given=
while [ $# -gt 0 ]; do
  case $1 in
    --python) [ $# -ge 2 ] || usage; given=$2; shift 2 ;;
    *) usage ;;
  esac
done

# A plain absolute path: it is written into scripts and compared as text below.
case $target in
  /*) ;;
  *) die "expected TARGET as an absolute path, found '$target'." "Give the full path, e.g. /opt/lockbuild." ;;
esac
case $target in
  *[!A-Za-z0-9._/+-]*|*/../*|*/..|*/./*|*/.|*//*)
    die "expected TARGET made of letters, digits and . _ / + - only, with no . or .. parts, found '$target'." ;;
esac
target=${target%/}
if [ -e "$target" ] || [ -L "$target" ]; then
  die "$target exists already; expected a path that does not exist yet." \
    "To update an installed lockbuild, run: $target/bin/lockbuild install $BUNDLE --root /opt/lockbuild-engines"
fi
parent=${target%/*}
[ -n "$parent" ] || parent=/
name=${target##*/}
[ -d "$parent" ] || die "the directory $parent does not exist; expected TARGET's parent to exist." \
  "Create it first (mkdir -p $parent)."
[ -w "$parent" ] || die "cannot write to $parent; the staging directory is made beside TARGET." \
  "Run as a user who may write there (root for /opt)."
for tool in sha256sum tar gzip mktemp mv rm find id dd sed grep readlink dirname; do
  command -v "$tool" >/dev/null 2>&1 || die "this node has no '$tool' on PATH; the bootstrap needs it." \
    "Install coreutils, tar and gzip from the node's own media."
done

# --- the ownership rules (tests/install/test_node_python.py runs this block on its own): begin
uid=$(id -u)
# The rule lockbuild holds --root to (lockbuild/fsio/owners.py::ancestor_problem): a directory is safe when root
# or this user owns it and neither its group nor others may write it, unless it is sticky (like /tmp,
# where no one may rename another's entry). shared D prints D when it is not safe (or cannot be examined).
shared() {
  found=$(find "$1" -maxdepth 0 \( ! -user 0 ! -user "$uid" \) -o \( \( -perm -0020 -o -perm -0002 \) ! -perm -1000 \) \
    2>/dev/null) || found=$1
  printf '%s' "$found"
}
# above D prints the first directory from D up to / that is not safe: another user could rename D (or a
# directory above it) away and put their own in its place after anything here was checked.
above() {
  d=$1
  while :; do
    found=$(shared "$d")
    if [ -n "$found" ]; then printf '%s' "$found"; return; fi
    [ "$d" != / ] || return 0
    d=${d%/*}
    [ -n "$d" ] || d=/
  done
}
# open_to_others P: every directory from P's up to / lets other users in (o+x), and so does P itself.
open_to_others() {
  d=$1
  while :; do
    [ -n "$(find "$d" -maxdepth 0 -perm -0001 2>/dev/null)" ] || return 1
    [ "$d" != / ] || return 0
    d=${d%/*}
    [ -n "$d" ] || d=/
  done
}
# Nothing in a tree but plain files and directories of root's or ours that no one else may write.
unsafe() { find "$1" -maxdepth 64 \( ! -user 0 ! -user "$uid" \) -o -perm -0020 -o -perm -0002 \
  -o ! \( -type f -o -type d \) 2>/dev/null | head -n 1; }
# program_problem P prints the first thing on P's way that another user could swap (nothing when none): a
# directory above P as named, above each symbolic link its resolution reads or above the file it ends at
# that fails the rule above; such a link owned by another user; or the file itself, owned by another user
# or writable by others. P is walked a component at a time, as the kernel resolves it. The rule lockbuild's
# installer holds its interpreter to (lockbuild/fsio/owners.py::program_problem): --root's, on every step.
program_problem() {
  case $1 in /*) rest=${1#/} ;; *) rest=$(pwd -P)/$1; rest=${rest#/} ;; esac
  here=
  hops=0
  while [ -n "$rest" ]; do
    part=${rest%%/*}
    case $rest in */*) rest=${rest#*/} ;; *) rest= ;; esac
    case $part in
      ''|.) continue ;;
      ..) here=${here%/*}; continue ;;
    esac
    step=$here/$part
    if [ -L "$step" ]; then
      hops=$((hops + 1))
      [ "$hops" -le 40 ] || { printf '%s' "$step"; return 0; }
      odd=$(above "${here:-/}")
      [ -z "$odd" ] || { printf '%s' "$odd"; return 0; }
      odd=$(find "$step" -maxdepth 0 ! -user 0 ! -user "$uid" 2>/dev/null) || odd=$step
      [ -z "$odd" ] || { printf '%s' "$odd"; return 0; }
      link=$(readlink -- "$step") || { printf '%s' "$step"; return 0; }
      case $link in /*) here= ;; esac
      rest=${link#/}${rest:+/$rest}
    elif [ -e "$step" ]; then
      here=$step
    else
      printf '%s' "$step"
      return 0
    fi
  done
  odd=$(find "${here:-/}" -maxdepth 0 \( ! -user 0 ! -user "$uid" \) -o -perm -0020 -o -perm -0002 2>/dev/null) \
    || odd=${here:-/}
  if [ -z "$odd" ]; then
    up=${here%/*}
    odd=$(above "${up:-/}")
  fi
  printf '%s' "$odd"
}
# --- the ownership rules: end
odd=$(above "$parent")
[ -z "$odd" ] || die "$odd is writable by other users (or owned by one), so another user could replace TARGET in $parent; expected directories only root or you can write." \
  "Install under a directory such as /opt, owned by root with mode 755."

dir=$(cd -P -- "$(dirname -- "$0")" && pwd) || die "cannot enter the directory of $0."
[ -f "$dir/SHA256SUMS" ] || die "$dir has no SHA256SUMS; expected an extraction of lockbuild's own bundle." \
  "Extract the whole .lbz: zstd -dc FILE.lbz | tar -x -C DIR"
odd=$(above "$dir")
[ -z "$odd" ] || die "the extraction $dir sits in $odd, which another user can write (or owns), so they could swap the extraction for their own while this script runs; expected directories only root or you can write, up to /." \
  "Extract as the user who runs the bootstrap into a new directory under one only you (or root) can write, e.g. mkdir -m 700 /root/lb && zstd -dc FILE.lbz | tar -x -C /root/lb"

odd=$(unsafe "$dir")
[ -z "$odd" ] || die "the extraction in $dir holds $odd, which another user could change (or which is not a plain file or directory); expected files only you or root can write." \
  "Extract again as the user who runs the bootstrap, with umask 022, into a new directory: mkdir DIR && zstd -dc FILE.lbz | tar -x -C DIR"

stage=$(mktemp -d "$parent/.$name.partial.XXXXXX") || die "cannot make a staging directory in $parent."
trap 'rm -rf -- "$stage"' EXIT
trap 'exit 130' INT TERM HUP
chmod 700 "$stage"

# 0. The copy, then nothing of $dir again: what is checked below is what is used.
say "copying the extraction in $dir into $stage"
mkdir "$stage/.bundle"
here=$stage/.bundle
(cd "$dir" && tar -cf - .) | tar -xf - -C "$here" --no-same-owner --no-same-permissions \
  || die "cannot copy the extraction in $dir into $stage."
odd=$(unsafe "$here")
[ -z "$odd" ] || die "the copy of the extraction in $dir holds ${odd#"$here"/}, which is not a plain file or directory; expected the files of lockbuild's bundle only." \
  "Extract the .lbz again into a new directory: mkdir DIR && zstd -dc FILE.lbz | tar -x -C DIR"

# 1. Every member as the builder listed it (the list itself is covered by the bundle's signature).
say "checking the extracted members from $dir against SHA256SUMS"
if ! report=$(cd "$here" && sha256sum -c SHA256SUMS 2>&1); then
  printf '%s\n' "$report" | grep -v ': OK$' | head -n 5 >&2
  die "the extraction in $dir does not match the bundle's signed list of members (a damaged or incomplete extraction); nothing was installed." \
    "Verify the .lbz again with minisign -Vm, extract it into an empty directory, and run the bootstrap again."
fi

export UV_NO_CONFIG=1 UV_OFFLINE=1 UV_PYTHON_DOWNLOADS=never UV_CACHE_DIR="$stage/.uv-cache" NO_COLOR=1
export PIP_CONFIG_FILE=/dev/null NETRC=/dev/null
mkdir "$stage/.tmp"
export TMPDIR="$stage/.tmp"  # uv keeps its lock files there: nothing is left in the node's /tmp

# 2. The interpreter, then uv out of its wheel (with that interpreter's zipfile: no unzip needed).
if [ -n "$given" ]; then
  base=$given
elif [ -n "$INTERPRETER" ]; then
  say "unpacking the bundled Python $PYTHON_VERSION (${INTERPRETER#python/})"
  tar -xzf "$here/$INTERPRETER" -C "$stage" --no-same-owner || die "cannot unpack $INTERPRETER."
  [ -d "$stage/python" ] || die "$INTERPRETER holds no python/ directory; expected a python-build-standalone install_only archive."
  mv "$stage/python" "$stage/env"
  base=$stage/env/bin/python$PYTHON_VERSION
elif [ -x "/usr/bin/python$PYTHON_VERSION" ]; then
  base=/usr/bin/python$PYTHON_VERSION  # the system's before whatever PATH names (a home directory's pyenv)
elif [ -x "/usr/local/bin/python$PYTHON_VERSION" ]; then
  base=/usr/local/bin/python$PYTHON_VERSION
else
  base=$(command -v "python$PYTHON_VERSION" 2>/dev/null) || die \
    "this bundle carries no interpreter, and no python$PYTHON_VERSION is on PATH." \
    "Pass --python /path/to/python$PYTHON_VERSION, or use the lockbuild bundle that carries its own Python."
  say "warning: taking $base from PATH (no /usr/bin/python$PYTHON_VERSION); pass --python to choose"
fi
[ -x "$base" ] || die "the interpreter $base is not an executable file."
case $base in
  "$stage"/*) ;;
  *)
    real=$(readlink -f -- "$base") || die "cannot resolve the interpreter $base."
    odd=$(program_problem "$base")  # as named, every link on its way, and what it resolves to
    [ -z "$odd" ] || die "the interpreter $base (${real}) is in or under $odd, which another user can write (or owns), so they could swap it for their own before it runs as you; expected an interpreter only root or you can change." \
      "Pass --python with an interpreter under directories only root (or you) can write, such as /usr/bin/python$PYTHON_VERSION."
    # Everyone who can reach TARGET must be able to run its interpreter: one under a directory they
    # cannot enter (root's 0700 home, a pyenv there) would give them "Permission denied" at every run.
    if open_to_others "$parent" && ! open_to_others "$real"; then
      die "the interpreter $base ($real) lies under a directory other users cannot enter, but $parent is open to them: lockbuild installed there would not run for them; expected an interpreter every user can run." \
        "Pass --python /usr/bin/python$PYTHON_VERSION (or another interpreter all users can run), or use the lockbuild bundle that carries its own Python."
    fi
    base=$real
    ;;
esac
got=$("$base" -I -B -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) || die "the interpreter $base does not run."
[ "$got" = "$PYTHON_VERSION" ] || die "this bundle is built for Python $PYTHON_VERSION, but $base is Python $got." \
  "Pass --python with a Python $PYTHON_VERSION interpreter."

mkdir "$stage/.tools"
"$base" -I -B -c '
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    names = [n for n in z.namelist() if n.endswith(".data/scripts/uv")]
    if len(names) != 1:
        sys.exit("the uv wheel holds %d uv binaries; expected one" % len(names))
    with z.open(names[0]) as src, open(sys.argv[2], "xb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
' "$here/$UV_WHEEL" "$stage/.tools/uv" || die "cannot take uv out of $UV_WHEEL."
chmod 755 "$stage/.tools/uv"
uv=$stage/.tools/uv

if [ -n "$given" ] || [ -z "$INTERPRETER" ]; then
  say "making an environment with $base"
  "$uv" venv --quiet --relocatable --python "$base" --no-project "$stage/env" || die "uv venv failed."
  py=$stage/env/bin/python
  system=
else
  py=$base
  system=--break-system-packages
fi

# 3. The lock, offline, from the bundle's wheels only, every file by its sha256.
say "installing lockbuild $LOCKBUILD_VERSION offline with the bundled uv"
# shellcheck disable=SC2086  # $system is one flag or nothing
"$uv" pip install --quiet --python "$py" $system --offline --no-index --require-hashes --no-build \
  --compile-bytecode --link-mode copy --find-links "$here/wheels" -r "$here/lock/requirements.txt" \
  || die "uv could not install the bundle's lock; nothing was installed."
rm -rf -- "$stage/.uv-cache" "$stage/.tools" "$stage/.tmp" "$stage/.bundle"

if [ -n "$system" ]; then
  # Console scripts in the interpreter's bin/ name it by the staging path: point them at TARGET.
  from=$(printf '%s' "$stage" | sed 's/[.]/\\./g')
  for f in "$stage/env/bin/"*; do
    [ -f "$f" ] && [ ! -L "$f" ] || continue
    [ "$(dd if="$f" bs=2 count=1 2>/dev/null)" = '#!' ] || continue
    grep -q "$stage/" "$f" || continue
    sed "1,3s|$from/|$target/|g" "$f" >"$f.new" && chmod 755 "$f.new" && mv -f "$f.new" "$f"
  done
fi

mkdir "$stage/bin"
cat >"$stage/bin/lockbuild" <<EOF
#!/bin/sh
# lockbuild $LOCKBUILD_VERSION, installed by the bootstrap of $BUNDLE; runs isolated (python -I).
here=\$(dirname -- "\$(readlink -f -- "\$0")")
exec "\$here/../env/bin/python$PYTHON_VERSION" -I -m lockbuild "\$@"
EOF
chmod 755 "$stage/bin/lockbuild"
"$base" -I -B -c '
import json, sys
keys = ("lockbuild", "bundle", "python", "interpreter")
with open(sys.argv[1], "x", encoding="utf-8") as f:
    json.dump(dict(zip(keys, sys.argv[2:])), f, indent=2, sort_keys=True)
    f.write("\n")
' "$stage/lockbuild.json" "$LOCKBUILD_VERSION" "$BUNDLE" "$PYTHON_VERSION" \
  "${given:-${INTERPRETER:-python$PYTHON_VERSION on PATH}}" || die "cannot write $stage/lockbuild.json."

# 4. It runs, from the staging directory.
shown=$("$stage/bin/lockbuild" --version 2>&1) || die "the installed lockbuild does not run: $shown"
case $shown in
  *"$LOCKBUILD_VERSION"*) ;;
  *) die "the installed lockbuild says '$shown'; expected version $LOCKBUILD_VERSION." ;;
esac

# 5. Into place: one rename within $parent that never replaces anything (renameat2 RENAME_NOREPLACE:
# a TARGET that appeared meanwhile, even an empty directory or a link, makes it fail).
chmod 755 "$stage"
"$base" -I -B -c '
import ctypes, errno, os, sys
src, dst = sys.argv[1], sys.argv[2]
libc = ctypes.CDLL(None, use_errno=True)
try:
    renameat2 = libc.renameat2
except AttributeError:  # a C library older than glibc 2.28: check, then rename(2)
    if os.path.lexists(dst):
        sys.exit(dst + " appeared while installing; nothing was changed there")
    os.rename(src, dst)
    sys.exit(0)
AT_FDCWD, RENAME_NOREPLACE = -100, 1
if renameat2(AT_FDCWD, os.fsencode(src), AT_FDCWD, os.fsencode(dst), RENAME_NOREPLACE) != 0:
    err = ctypes.get_errno()
    if err == errno.EEXIST:
        sys.exit(dst + " appeared while installing; nothing was changed there")
    sys.exit("cannot rename " + src + " to " + dst + ": " + os.strerror(err))
' "$stage" "$target" || die "the staging directory was not renamed to $target; nothing was installed."
trap - EXIT
say "installed $shown at $target (run $target/bin/lockbuild, or link it: ln -s $target/bin/lockbuild /usr/local/bin/lockbuild)"
