"""The file primitives: the one package of lockbuild that opens, lists, locks and deletes files.

Everything lockbuild reads from outside (a bundle, a signature file, a key, a store's blob, a part, a
delta, a registry answer) and every tree it deletes goes through these functions, so each rule lives
once:

- a file from outside is opened with ``O_NOFOLLOW | O_NONBLOCK`` and judged on its descriptor
  (``fstat``): a regular file of bounded size, never a link, FIFO, device or directory
  (``fsio/opening.py``);
- a new file is created ``O_CREAT|O_EXCL|O_NOFOLLOW``, a temporary one beside its result under an
  unguessable name, and what killed runs left is swept by descriptor (``fsio/creating.py``);
- a directory is opened without following a link, and what is inside it is linked, renamed and
  deleted *relative to that descriptor* (``linkat``/``renameat``/``unlinkat``), never through a path
  built after a check (``fsio/trees.py``); a directory is fsynced after a rename into it;
- a lock waits up to a deadline and then fails (``fsio/filelocks.py``);
- a place lockbuild works in (``--root``, a store) is safe only when every directory above it is owned by
  root or this user and writable by no one else unless sticky (``ancestor_problem``, the one rule, in
  ``fsio/owners.py``); a program of the node's that lockbuild runs (the interpreter) follows that rule as
  named, on every link of its way and as resolved (``program_problem``).

Reads are bounded; a copy hashes what it copies (``lockbuild.digest.pump``, the one read-hash loop); JSON,
parsed with a size and a nesting bound, is ``lockbuild.jsonio``. Import the names from ``lockbuild.fsio``.

``tests/test_layout.py`` fails when library code outside this package calls ``os.open`` (or deletes a
tree by path) outside a short allow-list, each entry with its reason.
"""

from __future__ import annotations

from lockbuild.fsio.creating import (
    STALE_BESIDE_SECONDS,
    append_existing,
    create_new,
    create_under,
    is_beside,
    open_writable,
    sweep_beside,
    sweep_stale,
    temp_beside,
    walk_making,
    write_new,
    write_replacing,
)
from lockbuild.fsio.filelocks import busy_error, flock_by, flocked, open_lockfile
from lockbuild.fsio.opening import (
    DIR_FLAGS,
    FILE_FLAGS,
    NEW_FLAGS,
    ancestry,
    bounded_read,
    fd_path,
    kind_of,
    list_dir,
    lstat_at,
    open_dir,
    open_regular,
    open_under,
    opened_dir,
    read_link_at,
    read_regular,
)
from lockbuild.fsio.owners import Unsafe, ancestor_problem, owner_problem, program_problem
from lockbuild.fsio.trees import (
    fsync_dir,
    fsync_dir_path,
    link_file,
    link_under,
    make_dirs_under,
    remove_at,
    remove_tree,
    rename_at,
    sweep_dirs_beside,
    symlink_under,
)

__all__ = [
    "DIR_FLAGS",
    "FILE_FLAGS",
    "NEW_FLAGS",
    "STALE_BESIDE_SECONDS",
    "Unsafe",
    "ancestor_problem",
    "ancestry",
    "append_existing",
    "bounded_read",
    "busy_error",
    "create_new",
    "create_under",
    "fd_path",
    "flock_by",
    "flocked",
    "fsync_dir",
    "fsync_dir_path",
    "is_beside",
    "kind_of",
    "link_file",
    "link_under",
    "list_dir",
    "lstat_at",
    "make_dirs_under",
    "open_dir",
    "open_lockfile",
    "open_regular",
    "open_under",
    "open_writable",
    "opened_dir",
    "owner_problem",
    "program_problem",
    "read_link_at",
    "read_regular",
    "remove_at",
    "remove_tree",
    "rename_at",
    "sweep_beside",
    "sweep_dirs_beside",
    "sweep_stale",
    "symlink_under",
    "temp_beside",
    "walk_making",
    "write_new",
    "write_replacing",
]
