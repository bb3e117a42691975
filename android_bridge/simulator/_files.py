"""The phone's file tree and the toybox tools that change it, as far as the fence and the send
script need them.

The tree is a table in the phone's store file (one SQLite row per name), so each system call
below is one transaction: ``mkdir(2)`` and ``symlink(2)`` are atomic across connections,
threads and processes, exactly as the kernel makes them, and everything survives a reboot or
a restart of the simulator. Path lookup follows Linux (``fs/namei.c``): symlinks in the middle
of a path are followed (at most 40), a trailing slash follows the last one, ``ENOTDIR`` when a
file stands where a directory must, and the DAC checks (search on every directory walked,
write and search on the directory changed, read to list; root passes them all, as with
``CAP_DAC_OVERRIDE``). Errors print bionic's ``strerror`` texts
(``libc/private/bionic_errdefs.h``).

What the phone starts with (system/core ``rootdir/init.rc``, android-10.0.0_r1 to
android-15.0.0_r1, ``on post-fs-data``): ``/`` (the read-only system image: creating there
fails with ``EROFS``), ``/data`` (``chmod 0771``, ``chown system system``), ``/data/local``
(``mkdir … 0751 root root``) and ``/data/local/tmp`` (``mkdir /data/local/tmp 0771 shell
shell``; "For security reasons, /data/local/tmp should always be empty", yet nothing empties
it: it survives reboots). From Android 11 ``/data/local`` is created ``encryption=Require``
with the system-wide device key (``init/README.md``: "ref: use the systemwide DE key"), so it
is readable before the user first unlocks. init re-applies those modes and owners at every
boot, and creates the directories again if they are missing. Nothing else of a phone's
filesystem is modelled: ``ls /`` shows only ``data``.

adbd runs the shell with ``umask(0)`` (system/core ``adb/daemon/main.cpp`` ``adbd_main``,
android-10.0.0_r1), so ``mkdir`` makes ``0777`` directories and ``touch`` or a shell
redirection (``>FILE``) ``0666`` files owned by the caller (``shell`` 2000, ``root`` 0, or
whoever ``su`` became). A regular file holds bytes (``open``, ``read``, ``write`` with an
offset or ``O_APPEND``; hard links share them), which the shell's redirections and ``cat``
read and write.

The tools follow toybox (``toys/posix/mkdir.c``, ``ln.c``, ``ls.c``, ``rm.c``, ``rmdir.c``,
``touch.c``, ``cat.c``, ``toys/other/readlink.c``, ``lib/args.c``, ``lib/lib.c``,
``lib/dirtree.c``) as Android ships it: Android 10 carries upstream toybox 0.8.0 (LineageOS
``android_external_toybox`` ``lineage-17.1``, ``TOYBOX_VERSION "0.8.0"``), Android 11 the
upstream tree of 2020-02-28 (``lineage-18.1``), 12 to 15 later snapshots (see
:class:`ToyboxRelease` for what differs). ``test`` and ``[`` are mksh's builtins
(``funcs.c`` ``c_test``, mksh R59c).
"""

from __future__ import annotations

import functools
import posixpath
import re
import secrets
import sqlite3
import stat as statmod
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Final, Literal
from zoneinfo import ZoneInfo

import attrs

from android_bridge._private_files import make_private_dirs
from android_bridge.simulator._shell import (
    SHELL_NAME,
    STDOUT_IS_TERMINAL,
    CommandFn,
    Output,
    RedirectFailed,
    TerminalReadError,
    read_input,
)
from android_bridge.simulator._su import user_name

# -- errors ------------------------------------------------------------------------------

EPERM: Final = 1
ENOENT: Final = 2
EIO: Final = 5
EACCES: Final = 13
EBUSY: Final = 16
EEXIST: Final = 17
ENOTDIR: Final = 20
EISDIR: Final = 21
EINVAL: Final = 22
EROFS: Final = 30
ENAMETOOLONG: Final = 36
ENOTEMPTY: Final = 39
ELOOP: Final = 40

#: bionic's ``strerror`` (``libc/private/bionic_errdefs.h``). glibc says "Too many levels of
#: symbolic links" for ``ELOOP``; bionic keeps the kernel's wording.
STRERROR: Final = {
    EPERM: "Operation not permitted",
    ENOENT: "No such file or directory",
    EIO: "I/O error",
    EACCES: "Permission denied",
    EBUSY: "Device or resource busy",
    EEXIST: "File exists",
    ENOTDIR: "Not a directory",
    EISDIR: "Is a directory",
    EINVAL: "Invalid argument",
    EROFS: "Read-only file system",
    ENAMETOOLONG: "File name too long",
    ENOTEMPTY: "Directory not empty",
    ELOOP: "Too many symbolic links encountered",
}

#: Linux ``MAXSYMLINKS``: a path lookup follows at most this many symlinks (``ELOOP``).
MAX_SYMLINKS: Final = 40
#: ``NAME_MAX``: a longer name fails with ``ENAMETOOLONG``.
NAME_MAX: Final = 255


class FsError(Exception):
    """A system call failed with ``errno``."""

    def __init__(self, errno: int) -> None:
        super().__init__(STRERROR.get(errno, f"errno {errno}"))
        self.errno = errno

    @property
    def strerror(self) -> str:
        """bionic's text for the errno."""
        return STRERROR.get(self.errno, f"Unknown error {self.errno}")


# -- records -----------------------------------------------------------------------------

Kind = Literal["dir", "file", "symlink"]

ROOT_UID: Final = 0
SYSTEM_UID: Final = 1000
SHELL_UID: Final = 2000

#: Directories init creates at every boot: (path, mode, uid, gid), in order (``init.rc``).
INIT_DIRECTORIES: Final = (
    ("/", 0o755, ROOT_UID, ROOT_UID),
    ("/data", 0o771, SYSTEM_UID, SYSTEM_UID),
    ("/data/local", 0o751, ROOT_UID, ROOT_UID),
    ("/data/local/tmp", 0o771, SHELL_UID, SHELL_UID),
)
#: ``/data/local/tmp``: the shell user's own directory.
LOCAL_TMP: Final = "/data/local/tmp"
#: Mount points: ``rmdir`` and ``rename`` of them fail with ``EBUSY``.
_MOUNT_POINTS: Final = frozenset({"/", "/data"})
#: ext4 reports 4096 for a directory (f2fs phones show 3452; nothing should parse it).
_DIR_SIZE: Final = 4096
#: ``FileTree`` forgets the rows it keeps past this many names (a test that makes thousands
#: of files should not hold them all in memory).
_ROWS_KEPT: Final = 4096


@attrs.frozen(kw_only=True)
class Credentials:
    """Who a process is: the fsuid, fsgid and supplementary groups the kernel checks."""

    #: User id (0 root, 1000 system, 2000 shell).
    uid: int
    #: Primary group id.
    gid: int
    #: Supplementary groups.
    groups: tuple[int, ...] = ()

    @property
    def root(self) -> bool:
        """uid 0: ``CAP_DAC_OVERRIDE`` passes every permission check."""
        return self.uid == ROOT_UID


ROOT: Final = Credentials(uid=ROOT_UID, gid=ROOT_UID)


@attrs.frozen(kw_only=True)
class FileStat:
    """What ``stat(2)``/``lstat(2)`` return for one name."""

    #: The canonical absolute path of the entry (the name ``lstat`` looked at).
    path: str
    #: ``dir``, ``file`` or ``symlink``.
    kind: Kind
    #: Permission bits with setuid (0o4000), setgid (0o2000) and sticky (0o1000).
    mode: int
    #: Owner.
    uid: int
    #: Group.
    gid: int
    #: Inode number (hard links share it).
    ino: int
    #: Link count: 2 plus subdirectories for a directory, names sharing the inode otherwise.
    nlink: int
    #: ``st_size``: 4096 for a directory, the target's length for a symlink, a file's bytes.
    size: int
    #: Modification time, ns since the epoch (device clock).
    mtime_ns: int
    #: The symlink's target, as written (None for other kinds).
    target: str | None = None

    @property
    def is_dir(self) -> bool:
        """A directory."""
        return self.kind == "dir"

    @property
    def is_symlink(self) -> bool:
        """A symbolic link (only ``lstat`` returns one)."""
        return self.kind == "symlink"

    @property
    def st_mode(self) -> int:
        """``st_mode`` with the file type bits."""
        kind_bits = {"dir": statmod.S_IFDIR, "file": statmod.S_IFREG, "symlink": statmod.S_IFLNK}
        return kind_bits[self.kind] | self.mode


_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS files (
    path TEXT PRIMARY KEY,
    parent TEXT,
    kind TEXT NOT NULL CHECK (kind IN ('dir', 'file', 'symlink')),
    mode INTEGER NOT NULL CHECK (mode BETWEEN 0 AND 4095),
    uid INTEGER NOT NULL,
    gid INTEGER NOT NULL,
    ino INTEGER NOT NULL,
    target TEXT CHECK ((kind = 'symlink') = (target IS NOT NULL)),
    mtime_ns INTEGER NOT NULL,
    content BLOB
);
CREATE INDEX IF NOT EXISTS files_by_parent ON files (parent, path);
CREATE INDEX IF NOT EXISTS files_by_ino ON files (ino);
"""

_COLUMNS: Final = "path, kind, mode, uid, gid, ino, target, mtime_ns"


@attrs.frozen
class _Row:
    path: str
    kind: Kind
    mode: int
    uid: int
    gid: int
    ino: int
    target: str | None
    mtime_ns: int


@attrs.frozen
class _Found:
    """A looked-up name: the directory holding it, its last component, and its row."""

    parent: str
    name: str
    row: _Row | None

    @property
    def path(self) -> str:
        return _join(self.parent, self.name)


def _join(directory: str, name: str) -> str:
    return "/" + name if directory == "/" else f"{directory}/{name}"


def _parent_of(path: str) -> str:
    return posixpath.dirname(path) or "/"


def _on_data(directory: str) -> bool:
    """Whether ``directory`` lies on the writable ``/data`` partition (the rest is the
    read-only system image)."""
    return directory == "/data" or directory.startswith("/data/")


class _Transaction:
    """``with tree._transaction(write=…)``: one system call's SQLite transaction, committed
    at the end or rolled back by an exception (which goes on)."""

    __slots__ = ("_tree", "_write")

    def __init__(self, tree: FileTree, write: bool) -> None:
        self._tree = tree
        self._write = write

    def __enter__(self) -> None:
        self._tree._begin(self._write)

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> Literal[False]:
        self._tree._end(failed=kind is not None)
        return False


class FileTree:
    """The phone's files, in the ``files`` table of the store file.

    Each method is one system call and one SQLite transaction (``BEGIN IMMEDIATE`` for
    changes), so concurrent callers, in this process or another, see the kernel's atomicity.
    ``cred`` is the caller (permission checks) and ``cwd`` the directory relative paths
    start from (the shell's, ``/`` for an adb shell).
    """

    def __init__(self, path: Path, *, clock_ns: Callable[[], int]) -> None:
        self.path = Path(path)
        make_private_dirs(self.path.parent)  # 0700, as every directory starebrain makes
        self._clock_ns = clock_ns
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA busy_timeout = 10000")
        # NORMAL: a write survives the process; the phone's store is a test bed, not a bank.
        self._db.execute("PRAGMA synchronous = NORMAL")
        self._db.executescript(_SCHEMA)
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(files)")}
        if "content" not in columns:
            # a store made before files had contents: every file in it is empty
            self._db.execute("ALTER TABLE files ADD COLUMN content BLOB")
        # What this connection has read or written of the table, kept across system calls
        # while nobody else writes the file: a send's script walks the same few directories
        # in every command. Keyed by path; None is a name known to be absent.
        self._rows: dict[str, _Row | None] = {}
        # the kept names of each inode, so that a write to a file finds its names without a
        # walk over all of ``_rows`` (a name may have moved on since: check its row's ino)
        self._names: dict[int, set[str]] = {}
        # ``PRAGMA data_version`` when ``_rows`` was last known right: SQLite changes it
        # when another connection (the SMS store's, another process's) commits to the file,
        # never for this connection's own commits, which update ``_rows`` as they write.
        self._data_version = -1
        # Beside the rows, kept and forgotten with them: the contents of inodes, the number
        # of subdirectories of directories (their link count) and the highest inode number.
        self._contents: dict[int, bytes] = {}
        self._subdirs: dict[str, int] = {}
        self._last_ino: int | None = None
        # whether the transaction under way wrote: rolled back, what it put in ``_rows``
        # never happened
        self._wrote = False

    def close(self) -> None:
        """Close the connection."""
        self._db.close()

    # -- transactions ---------------------------------------------------------------------

    def _transaction(self, *, write: bool) -> _Transaction:
        return _Transaction(self, write)

    def _begin(self, write: bool) -> None:
        self._db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        # read inside the transaction: the value belongs to the snapshot the rows come from
        version = self._db.execute("PRAGMA data_version").fetchone()[0]
        if version != self._data_version or len(self._rows) > _ROWS_KEPT:
            self._forget()
            self._data_version = version
        self._wrote = False

    def _end(self, failed: bool) -> None:
        if failed:
            self._db.execute("ROLLBACK")
            if self._wrote:
                self._forget()
            return
        try:
            self._db.execute("COMMIT")
        except BaseException:
            self._forget()
            raise

    def _forget(self) -> None:
        self._rows.clear()
        self._names.clear()
        self._contents.clear()
        self._subdirs.clear()
        self._last_ino = None

    def _keep(self, path: str, row: _Row | None) -> None:
        self._rows[path] = row
        if row is not None:
            self._names.setdefault(row.ino, set()).add(path)

    def _row(self, path: str) -> _Row | None:
        try:
            return self._rows[path]
        except KeyError:
            pass
        values = self._db.execute(
            f"SELECT {_COLUMNS} FROM files WHERE path = ?", (path,)
        ).fetchone()
        row = None if values is None else _Row(*values)
        self._keep(path, row)
        return row

    def _children(self, path: str) -> list[_Row]:
        rows = self._db.execute(
            f"SELECT {_COLUMNS} FROM files WHERE parent = ? ORDER BY path", (path,)
        ).fetchall()
        children = [_Row(*values) for values in rows]
        for child in children:
            self._keep(child.path, child)
        return children

    def _changed(self) -> None:
        """The transaction under way wrote rows ``_rows`` cannot follow: forget them all."""
        self._wrote = True
        self._forget()

    def _update_inode(
        self,
        ino: int,
        sql: str,
        values: tuple[object, ...],
        *,
        mode: int | None = None,
        mtime_ns: int | None = None,
        content: bytes | None = None,
    ) -> None:
        """Run ``sql``, an ``UPDATE`` of inode ``ino`` (its last parameter), and give every
        kept name of it the new ``mode`` or ``mtime_ns``: hard links share an inode's. The
        new ``content`` is kept only when the inode still has a name (an unlinked inode
        keeps nothing written to it)."""
        self._wrote = True
        updated = self._db.execute(sql, (*values, ino)).rowcount
        if content is not None and updated > 0:
            self._contents[ino] = content
        else:
            self._contents.pop(ino, None)
        for path in self._names.get(ino, ()):
            row = self._rows.get(path)
            if row is not None and row.ino == ino:
                self._rows[path] = attrs.evolve(
                    row,
                    mode=row.mode if mode is None else mode,
                    mtime_ns=row.mtime_ns if mtime_ns is None else mtime_ns,
                )

    def _next_ino(self) -> int:
        if self._last_ino is None:
            value = self._db.execute("SELECT COALESCE(MAX(ino), 1) FROM files").fetchone()[0]
            self._last_ino = int(value)
        return self._last_ino + 1

    def _insert(
        self,
        path: str,
        kind: Kind,
        mode: int,
        cred: Credentials,
        *,
        target: str | None = None,
        ino: int | None = None,
        gid: int | None = None,
    ) -> None:
        now = self._clock_ns()
        row = _Row(
            path,
            kind,
            mode,
            cred.uid,
            cred.gid if gid is None else gid,
            self._next_ino() if ino is None else ino,
            target,
            now,
        )
        self._wrote = True
        self._db.execute(
            "INSERT INTO files (path, parent, kind, mode, uid, gid, ino, target, mtime_ns)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                row.path,
                _parent_of(path),
                row.kind,
                row.mode,
                row.uid,
                row.gid,
                row.ino,
                row.target,
                row.mtime_ns,
            ),
        )
        self._keep(path, row)
        if self._last_ino is not None:
            self._last_ino = max(self._last_ino, row.ino)
        if kind == "file":
            self._contents[row.ino] = b""
        elif kind == "dir" and _parent_of(path) in self._subdirs:
            self._subdirs[_parent_of(path)] += 1
        self._touch_dir(_parent_of(path), now)

    def _touch_dir(self, path: str, now: int) -> None:
        self._wrote = True
        self._db.execute("UPDATE files SET mtime_ns = ? WHERE path = ?", (now, path))
        row = self._rows.get(path)
        if row is not None:
            self._rows[path] = attrs.evolve(row, mtime_ns=now)

    def _delete(self, path: str) -> None:
        self._wrote = True
        self._db.execute("DELETE FROM files WHERE path = ?", (path,))
        gone = self._rows.get(path)
        self._rows[path] = None
        # MAX(ino) may be lower now (the next name takes the number again), and an inode
        # whose last name this was has no contents left
        self._last_ino = None
        if gone is None:
            self._contents.clear()
            self._subdirs.clear()
        else:
            self._contents.pop(gone.ino, None)
            if gone.kind == "dir":
                self._subdirs.pop(path, None)
                if _parent_of(path) in self._subdirs:
                    self._subdirs[_parent_of(path)] -= 1
        self._touch_dir(_parent_of(path), self._clock_ns())

    # -- boot and test controls -------------------------------------------------------------

    def boot(self) -> None:
        """What init does at every boot: create the fixed directories if missing and set
        their mode and owner (``init.rc`` ``mkdir PATH MODE OWNER GROUP``)."""
        with self._transaction(write=True):
            self._changed()  # a failure half way rolls back: keep nothing either way
            for path, mode, uid, gid in INIT_DIRECTORIES:
                row = self._row(path)
                if row is not None and row.kind != "dir":
                    self._remove_tree(path)
                    row = None
                if row is None:
                    self._db.execute(
                        "INSERT INTO files (path, parent, kind, mode, uid, gid, ino, target,"
                        " mtime_ns) VALUES (?, ?, 'dir', ?, ?, ?, ?, NULL, ?)",
                        (
                            path,
                            None if path == "/" else _parent_of(path),
                            mode,
                            uid,
                            gid,
                            self._next_ino(),
                            self._clock_ns(),
                        ),
                    )
                else:
                    self._db.execute(
                        "UPDATE files SET mode = ?, uid = ?, gid = ? WHERE path = ?",
                        (mode, uid, gid, path),
                    )
            # the rows read above are the ones from before these writes
            self._changed()

    def _remove_tree(self, path: str) -> None:
        self._changed()
        self._db.execute(
            "DELETE FROM files WHERE path = ? OR path LIKE ? ESCAPE '\\'",
            (path, _like_prefix(path)),
        )

    def clear_children(self, path: str) -> None:
        """Delete everything below ``path`` (as ``rm -rf PATH/*``, dot names too), keeping
        ``path`` itself."""
        with self._transaction(write=True):
            self._changed()
            self._db.execute(
                "DELETE FROM files WHERE path LIKE ? ESCAPE '\\'", (_like_prefix(path),)
            )
            self._touch_dir(path, self._clock_ns())

    def wipe(self) -> None:
        """A factory reset: ``/data`` is formatted (every name below it is gone); the next
        ``boot`` recreates init's directories."""
        with self._transaction(write=True):
            self._changed()
            self._db.execute(
                "DELETE FROM files WHERE path LIKE ? ESCAPE '\\'", (_like_prefix("/data"),)
            )

    # -- path lookup (fs/namei.c) -------------------------------------------------------

    def _may(self, cred: Credentials, row: _Row, want: int) -> bool:
        """``generic_permission``: ``want`` is a mask of 4 (read), 2 (write), 1 (search)."""
        if cred.root:
            # CAP_DAC_OVERRIDE: everything, except executing a file with no x bit at all.
            return not (want & 1 and row.kind == "file" and not row.mode & 0o111)
        if cred.uid == row.uid:
            granted = row.mode >> 6
        elif cred.gid == row.gid or row.gid in cred.groups:
            granted = row.mode >> 3
        else:
            granted = row.mode
        return granted & want == want

    def _lookup(
        self, cred: Credentials, cwd: str, path: str, *, follow: bool, create: bool = False
    ) -> _Found:
        """Walk ``path`` as ``path_lookupat`` does; the last component is followed when it is
        a symlink and ``follow`` (or the path ends in ``/``).

        Raises:
            FsError: ENOENT, ENOTDIR, EACCES, ELOOP, ENAMETOOLONG along the way.
        """
        if not path:
            raise FsError(ENOENT)
        trailing = path.endswith("/")
        pending = [part for part in path.split("/") if part]
        current = "/" if path.startswith("/") else cwd
        links = 0
        if not pending:
            row = self._row(current)
            return _Found(_parent_of(current), posixpath.basename(current) or "/", row)
        # the row of the directory the walk stands in, when the last step read it already
        # (no write comes between: a lookup is part of one system call's transaction)
        known: _Row | None = None
        while pending:
            component = pending.pop(0)
            if len(component.encode("utf-8", "surrogateescape")) > NAME_MAX:
                raise FsError(ENAMETOOLONG)
            directory = known if known is not None and known.path == current else self._row(current)
            known = None
            if directory is None:
                raise FsError(ENOENT)
            if directory.kind != "dir":
                raise FsError(ENOTDIR)
            if not self._may(cred, directory, 1):
                raise FsError(EACCES)
            last = not pending
            if component == ".":
                if last:
                    return _Found(_parent_of(current), ".", directory)
                continue
            if component == "..":
                current = _parent_of(current)
                if last:
                    return _Found(_parent_of(current), "..", self._row(current))
                continue
            child = _join(current, component)
            row = self._row(child)
            if row is None:
                if last:
                    return _Found(current, component, None)
                raise FsError(ENOENT)
            if row.kind == "symlink" and (not last or follow or (trailing and not create)):
                links += 1
                if links > MAX_SYMLINKS:
                    raise FsError(ELOOP)
                assert row.target is not None
                if not row.target:
                    raise FsError(ENOENT)
                target_parts = [part for part in row.target.split("/") if part]
                if row.target.startswith("/"):
                    current = "/"
                pending = target_parts + pending
                if not pending:
                    # A link to "/": the root directory itself.
                    root = self._row("/")
                    return _Found("/", "/", root)
                continue
            if last:
                return _Found(current, component, row)
            current = child
            known = row
        raise AssertionError("unreachable")

    def _resolve(self, cred: Credentials, cwd: str, path: str, *, follow: bool) -> _Row:
        """The row ``path`` names; a trailing ``/`` requires a directory.

        Raises:
            FsError: the lookup failed, or ENOENT, or ENOTDIR for ``file/``.
        """
        found = self._lookup(cred, cwd, path, follow=follow)
        if found.row is None:
            raise FsError(ENOENT)
        if path.endswith("/") and found.row.kind == "file":
            raise FsError(ENOTDIR)
        return found.row

    def _stat_of(self, row: _Row) -> FileStat:
        if row.kind == "dir":
            subdirs = self._subdirs.get(row.path)
            if subdirs is None:
                subdirs = int(
                    self._db.execute(
                        "SELECT COUNT(*) FROM files WHERE parent = ? AND kind = 'dir'",
                        (row.path,),
                    ).fetchone()[0]
                )
                self._subdirs[row.path] = subdirs
            nlink = 2 + subdirs
            size = _DIR_SIZE
        elif row.kind == "file":
            nlink = int(
                self._db.execute("SELECT COUNT(*) FROM files WHERE ino = ?", (row.ino,)).fetchone()[
                    0
                ]
            )
            size = len(self._content(row.ino))
        else:
            nlink = 1
            size = len((row.target or "").encode("utf-8", "surrogateescape"))
        return FileStat(
            path=row.path,
            kind=row.kind,
            mode=row.mode,
            uid=row.uid,
            gid=row.gid,
            ino=row.ino,
            nlink=nlink,
            size=size,
            mtime_ns=row.mtime_ns,
            target=row.target,
        )

    # -- system calls ---------------------------------------------------------------------

    def stat(self, cred: Credentials, cwd: str, path: str) -> FileStat:
        """``stat(2)``: follows symlinks.

        Raises:
            FsError: ENOENT, ENOTDIR, EACCES, ELOOP.
        """
        with self._transaction(write=False):
            return self._stat_of(self._resolve(cred, cwd, path, follow=True))

    def lstat(self, cred: Credentials, cwd: str, path: str) -> FileStat:
        """``lstat(2)``: a symlink itself (unless the path ends in ``/``).

        Raises:
            FsError: ENOENT, ENOTDIR, EACCES, ELOOP.
        """
        with self._transaction(write=False):
            return self._stat_of(self._resolve(cred, cwd, path, follow=False))

    def access(self, cred: Credentials, cwd: str, path: str, want: int) -> None:
        """``access(2)``/``faccessat(2)`` for ``want`` (4 read, 2 write, 1 execute; 0 exists).

        Raises:
            FsError: the lookup failed, EACCES, or EROFS for write outside ``/data``.
        """
        with self._transaction(write=False):
            row = self._resolve(cred, cwd, path, follow=True)
            if want & 2 and not _on_data(row.path):
                raise FsError(EROFS)
            if want and not self._may(cred, row, want):
                raise FsError(EACCES)

    def readlink(self, cred: Credentials, cwd: str, path: str) -> str:
        """``readlink(2)``: the target of a symlink.

        Raises:
            FsError: ENOENT, EINVAL (not a symlink), the lookup's errors.
        """
        with self._transaction(write=False):
            row = self._resolve(cred, cwd, path, follow=False)
            if row.kind != "symlink" or path.endswith("/"):
                raise FsError(EINVAL)
            assert row.target is not None
            return row.target

    def listdir(self, cred: Credentials, cwd: str, path: str) -> list[str]:
        """``open`` + ``readdir`` of a directory: its names, ``.`` and ``..`` first.

        Raises:
            FsError: ENOENT, ENOTDIR, EACCES (no read permission), the lookup's errors.
        """
        with self._transaction(write=False):
            row = self._resolve(cred, cwd, path, follow=True)
            if row.kind != "dir":
                raise FsError(ENOTDIR)
            if not self._may(cred, row, 4):
                raise FsError(EACCES)
            return [
                ".",
                "..",
                *(posixpath.basename(child.path) for child in self._children(row.path)),
            ]

    def _creatable(self, cred: Credentials, found: _Found) -> _Row:
        """``may_create`` after ``filename_create``: EEXIST, then EROFS, then EACCES."""
        if found.row is not None or found.name in (".", "..", "/"):
            raise FsError(EEXIST)
        directory = self._row(found.parent)
        assert directory is not None
        if not _on_data(directory.path):
            raise FsError(EROFS)
        if not self._may(cred, directory, 3):
            raise FsError(EACCES)
        return directory

    def mkdir(self, cred: Credentials, cwd: str, path: str, mode: int) -> None:
        """``mkdir(2)``: atomic; fails with EEXIST when the name exists, whatever it is (a
        dangling symlink too).

        Raises:
            FsError: EEXIST, EROFS, EACCES, ENOENT, ENOTDIR, ELOOP.
        """
        with self._transaction(write=True):
            found = self._lookup(cred, cwd, path, follow=False, create=True)
            directory = self._creatable(cred, found)
            # The kernel keeps the permission bits and the sticky bit; a setgid directory
            # passes its group and its setgid bit on.
            bits = mode & 0o1777
            gid = None
            if directory.mode & 0o2000:
                bits |= 0o2000
                gid = directory.gid
            self._insert(found.path, "dir", bits, cred, gid=gid)

    def symlink(self, cred: Credentials, cwd: str, target: str, path: str) -> None:
        """``symlink(2)``: atomic; fails with EEXIST when the name exists, whatever it is.

        Raises:
            FsError: EEXIST, ENOENT (empty target, or ``name/`` for a new name), EROFS,
                EACCES, ENOTDIR, ELOOP.
        """
        with self._transaction(write=True):
            found = self._lookup(cred, cwd, path, follow=False, create=True)
            if found.row is None and path.endswith("/"):
                raise FsError(ENOENT)
            directory = self._creatable(cred, found)
            if not target:
                raise FsError(ENOENT)
            gid = directory.gid if directory.mode & 0o2000 else None
            self._insert(found.path, "symlink", 0o777, cred, target=target, gid=gid)

    def link(self, cred: Credentials, cwd: str, existing: str, path: str) -> None:
        """``link(2)``: another name for a file or symlink (never a directory: EPERM).

        Raises:
            FsError: ENOENT, EEXIST, EPERM, EROFS, EACCES, ENOTDIR, ELOOP.
        """
        with self._transaction(write=True):
            source = self._resolve(cred, cwd, existing, follow=False)
            found = self._lookup(cred, cwd, path, follow=False, create=True)
            if found.row is None and path.endswith("/"):
                raise FsError(ENOENT)
            directory = self._creatable(cred, found)
            if source.kind == "dir":
                raise FsError(EPERM)
            del directory
            now = self._clock_ns()
            self._wrote = True
            self._db.execute(
                "INSERT INTO files (path, parent, kind, mode, uid, gid, ino, target, mtime_ns)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    found.path,
                    found.parent,
                    source.kind,
                    source.mode,
                    source.uid,
                    source.gid,
                    source.ino,
                    source.target,
                    source.mtime_ns,
                ),
            )
            self._db.execute(
                "UPDATE files SET content = ? WHERE path = ?",
                (self._content(source.ino), found.path),
            )
            self._keep(found.path, attrs.evolve(source, path=found.path))
            self._touch_dir(found.parent, now)

    def _deletable(self, cred: Credentials, found: _Found) -> _Row:
        """``may_delete``: the name exists, the caller may write the directory, the sticky
        bit lets it (ENOENT, EROFS, EACCES, EPERM)."""
        if found.row is None:
            raise FsError(ENOENT)
        directory = self._row(found.parent)
        assert directory is not None
        if not _on_data(directory.path):
            raise FsError(EROFS)
        if not self._may(cred, directory, 3):
            raise FsError(EACCES)
        if (
            directory.mode & 0o1000
            and not cred.root
            and cred.uid not in (directory.uid, found.row.uid)
        ):
            raise FsError(EPERM)
        return found.row

    def unlink(self, cred: Credentials, cwd: str, path: str) -> None:
        """``unlink(2)``: remove a file or symlink name (a directory: EISDIR).

        Raises:
            FsError: ENOENT, EISDIR, ENOTDIR (``name/``), EROFS, EACCES, EPERM.
        """
        with self._transaction(write=True):
            found = self._lookup(cred, cwd, path, follow=False, create=True)
            if found.name in (".", ".."):
                raise FsError(EISDIR)
            row = self._deletable(cred, found)
            if path.endswith("/"):
                raise FsError(EISDIR if row.kind == "dir" else ENOTDIR)
            if row.kind == "dir":
                raise FsError(EISDIR)
            self._delete(row.path)

    def rmdir(self, cred: Credentials, cwd: str, path: str) -> None:
        """``rmdir(2)``: remove an empty directory.

        Raises:
            FsError: ENOENT, EINVAL (``.``), ENOTEMPTY (``..`` or entries left), ENOTDIR,
                EBUSY (a mount point), EROFS, EACCES, EPERM.
        """
        with self._transaction(write=True):
            found = self._lookup(cred, cwd, path, follow=False, create=True)
            if found.name == ".":
                raise FsError(EINVAL)
            if found.name == "..":
                raise FsError(ENOTEMPTY)
            if found.row is not None and found.row.path in _MOUNT_POINTS:
                raise FsError(EBUSY)
            row = self._deletable(cred, found)
            if row.kind != "dir":
                raise FsError(ENOTDIR)
            if self._children(row.path):
                raise FsError(ENOTEMPTY)
            self._delete(row.path)

    def rename(self, cred: Credentials, cwd: str, old: str, new: str) -> None:
        """``rename(2)`` (no directories moved into themselves: not needed here).

        Raises:
            FsError: ENOENT, EISDIR, ENOTDIR, ENOTEMPTY, EBUSY, EROFS, EACCES, EPERM, EINVAL.
        """
        with self._transaction(write=True):
            source_found = self._lookup(cred, cwd, old, follow=False, create=True)
            source = self._deletable(cred, source_found)
            if source.path in _MOUNT_POINTS:
                raise FsError(EBUSY)
            found = self._lookup(cred, cwd, new, follow=False, create=True)
            if found.name in (".", ".."):
                raise FsError(EBUSY)
            directory = self._row(found.parent)
            assert directory is not None
            if not _on_data(directory.path):
                raise FsError(EROFS)
            if not self._may(cred, directory, 3):
                raise FsError(EACCES)
            if found.path == source.path:
                return
            if source.kind == "dir" and (found.path + "/").startswith(source.path + "/"):
                raise FsError(EINVAL)
            if found.row is not None:
                if found.row.kind == "dir" and source.kind != "dir":
                    raise FsError(EISDIR)
                if found.row.kind != "dir" and source.kind == "dir":
                    raise FsError(ENOTDIR)
                if found.row.kind == "dir" and self._children(found.row.path):
                    raise FsError(ENOTEMPTY)
                self._remove_tree(found.row.path)
            prefix = source.path
            now = self._clock_ns()
            self._changed()
            rows = self._db.execute(
                "SELECT path FROM files WHERE path = ? OR path LIKE ? ESCAPE '\\'",
                (prefix, _like_prefix(prefix)),
            ).fetchall()
            for (old_path,) in rows:
                moved = found.path + old_path[len(prefix) :]
                self._db.execute(
                    "UPDATE files SET path = ?, parent = ? WHERE path = ?",
                    (moved, _parent_of(moved), old_path),
                )
            self._touch_dir(_parent_of(source.path), now)
            self._touch_dir(found.parent, now)

    def create_file(self, cred: Credentials, cwd: str, path: str) -> bool:
        """``open(path, O_CREAT)``: create an empty file (mode 0666) unless the name exists;
        a dangling symlink is followed and its target created. Returns whether it created.

        Raises:
            FsError: EISDIR for ``name/``, ENOENT, ENOTDIR, EROFS, EACCES, ELOOP.
        """
        with self._transaction(write=True):
            found = self._lookup(cred, cwd, path, follow=True)
            if found.row is not None:
                return False
            if path.endswith("/"):
                raise FsError(EISDIR)
            directory = self._creatable(cred, found)
            gid = directory.gid if directory.mode & 0o2000 else None
            self._insert(found.path, "file", 0o666, cred, gid=gid)
            return True

    def open(
        self,
        cred: Credentials,
        cwd: str,
        path: str,
        *,
        write: bool,
        create: bool = False,
        truncate: bool = False,
    ) -> int:
        """``open(2)`` (symlinks followed): the inode of the file ``path`` names. ``write``:
        opened for writing; ``create`` (``O_CREAT``): a missing name, or a dangling symlink's
        target, is created as an empty file, mode 0666 (adbd's umask is 0) owned by the
        caller; ``truncate`` (``O_TRUNC``): the file is emptied. The checks are
        ``do_last``/``may_open``'s (fs/namei.c): a directory opened for writing is
        ``EISDIR``; writing outside ``/data`` is ``EROFS``, then the mode bits (``EACCES``);
        creating needs write and search permission on the directory.

        Raises:
            FsError: ENOENT, EISDIR, ENOTDIR, EROFS, EACCES, ELOOP, ENAMETOOLONG.
        """
        with self._transaction(write=write or create):
            found = self._lookup(cred, cwd, path, follow=True)
            row = found.row
            if row is None:
                if not create:
                    raise FsError(ENOENT)
                if path.endswith("/"):
                    raise FsError(EISDIR)
                directory = self._creatable(cred, found)
                gid = directory.gid if directory.mode & 0o2000 else None
                self._insert(found.path, "file", 0o666, cred, gid=gid)
                created = self._row(found.path)
                assert created is not None
                return created.ino
            if path.endswith("/") and row.kind != "dir":
                raise FsError(ENOTDIR)
            if row.kind == "dir" and write:
                raise FsError(EISDIR)
            if write and not _on_data(row.path):
                raise FsError(EROFS)
            if not self._may(cred, row, 2 if write else 4):
                raise FsError(EACCES)
            if truncate and write and row.kind == "file":
                now = self._clock_ns()
                self._update_inode(
                    row.ino,
                    "UPDATE files SET content = x'', mtime_ns = ? WHERE ino = ?",
                    (now,),
                    mtime_ns=now,
                    content=b"",
                )
            return row.ino

    def _content(self, ino: int) -> bytes:
        content = self._contents.get(ino)
        if content is None:
            value = self._db.execute(
                "SELECT content FROM files WHERE ino = ? LIMIT 1", (ino,)
            ).fetchone()
            content = bytes(value[0]) if value is not None and value[0] is not None else b""
            self._contents[ino] = content
        return content

    def read(self, ino: int) -> bytes:
        """``read(2)`` of a whole open file (an inode from :meth:`open`); the file's names
        may be gone meanwhile (unlinked: its data too, here).

        Raises:
            FsError: EISDIR for a directory.
        """
        with self._transaction(write=False):
            kind = self._db.execute(
                "SELECT kind FROM files WHERE ino = ? LIMIT 1", (ino,)
            ).fetchone()
            if kind is not None and kind[0] == "dir":
                raise FsError(EISDIR)
            return self._content(ino)

    def write(self, ino: int, offset: int, data: bytes, *, append: bool) -> int:
        """``write(2)`` of ``data`` at ``offset`` (at the end with ``O_APPEND``) of an open
        file (an inode from :meth:`open`); returns the offset after it. A file whose every
        name was removed takes the write and keeps nothing (an unlinked inode)."""
        with self._transaction(write=True):
            content = self._content(ino)
            at = len(content) if append else offset
            padded = content.ljust(at, b"\0")
            changed = padded[:at] + data + padded[at + len(data) :]
            now = self._clock_ns()
            self._update_inode(
                ino,
                "UPDATE files SET content = ?, mtime_ns = ? WHERE ino = ?",
                (changed, now),
                mtime_ns=now,
                content=changed,
            )
            return at + len(data)

    def set_mtime(
        self, cred: Credentials, cwd: str, path: str, mtime_ns: int | None, *, follow: bool
    ) -> None:
        """``utimensat(2)``: set the modification time (now when None; only the owner or
        root may set another time, and "now" needs write permission otherwise).

        Raises:
            FsError: the lookup's errors, EACCES, EPERM, EROFS.
        """
        with self._transaction(write=True):
            row = self._resolve(cred, cwd, path, follow=follow)
            if not _on_data(row.path):
                raise FsError(EROFS)
            if not cred.root and cred.uid != row.uid:
                if mtime_ns is not None:
                    raise FsError(EPERM)
                if not self._may(cred, row, 2):
                    raise FsError(EACCES)
            value = self._clock_ns() if mtime_ns is None else mtime_ns
            self._update_inode(
                row.ino, "UPDATE files SET mtime_ns = ? WHERE ino = ?", (value,), mtime_ns=value
            )

    def chmod(self, cred: Credentials, cwd: str, path: str, mode: int) -> None:
        """``chmod(2)`` (follows symlinks): only the owner or root.

        Raises:
            FsError: the lookup's errors, EPERM, EROFS.
        """
        with self._transaction(write=True):
            row = self._resolve(cred, cwd, path, follow=True)
            if not cred.root and cred.uid != row.uid:
                raise FsError(EPERM)
            if not _on_data(row.path):
                raise FsError(EROFS)
            self._update_inode(
                row.ino,
                "UPDATE files SET mode = ? WHERE ino = ?",
                (mode & 0o7777,),
                mode=mode & 0o7777,
            )

    def realpath(self, cred: Credentials, cwd: str, path: str, *, missing: int) -> str | None:
        """toybox ``xabspath``: the canonical path, every symlink resolved. ``missing`` 1: the
        whole path must exist (``-e``), 0: all but the last component (``-f``), -1: none
        (``-m``). None when that fails.
        """
        with self._transaction(write=False):
            return self._realpath(cred, cwd, path, missing)

    def _realpath(self, cred: Credentials, cwd: str, path: str, missing: int) -> str | None:
        pending = [part for part in path.split("/") if part]
        current = "/" if path.startswith("/") else cwd
        links = 0
        gone = False
        while pending:
            component = pending.pop(0)
            last = not pending
            if component == ".":
                continue
            if component == "..":
                current = _parent_of(current)
                continue
            child = _join(current, component)
            if gone:
                if missing >= 0:
                    return None
                current = child
                continue
            directory = self._row(current)
            if directory is None or directory.kind != "dir" or not self._may(cred, directory, 1):
                if missing >= 0 or (directory is not None and directory.kind != "dir"):
                    return None
                gone = True
                current = child
                continue
            row = self._row(child)
            if row is None:
                if missing > 0 or (missing == 0 and not last):
                    return None
                gone = True
                current = child
                continue
            if row.kind == "symlink":
                links += 1
                if links > MAX_SYMLINKS:
                    return None
                assert row.target is not None
                if row.target.startswith("/"):
                    current = "/"
                pending = [part for part in row.target.split("/") if part] + pending
                continue
            if row.kind == "file" and not last:
                if missing >= 0:
                    return None
                gone = True
            current = child
        return current

    # -- reads for tests (no permission checks) -------------------------------------------

    def entries(self) -> list[FileStat]:
        """Every name in the tree with its lstat, ordered by path."""
        with self._transaction(write=False):
            rows = self._db.execute(f"SELECT {_COLUMNS} FROM files ORDER BY path").fetchall()
            return [self._stat_of(_Row(*values)) for values in rows]


def _like_prefix(path: str) -> str:
    """A LIKE pattern matching every path strictly below ``path``."""
    escaped = path.rstrip("/").replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "/%"


class FilesView:
    """The tree as a test sees it: as root, no permissions in the way (``phone.files``)."""

    def __init__(self, tree: FileTree) -> None:
        self._tree = tree

    def stat(self, path: str) -> FileStat | None:
        """``lstat`` of ``path`` (a symlink itself), or None when it does not exist."""
        try:
            return self._tree.lstat(ROOT, "/", path)
        except FsError:
            return None

    def exists(self, path: str) -> bool:
        """Whether the name exists (a dangling symlink does)."""
        return self.stat(path) is not None

    def is_dir(self, path: str) -> bool:
        """Whether ``path`` is a directory (not a symlink to one)."""
        found = self.stat(path)
        return found is not None and found.is_dir

    def is_symlink(self, path: str) -> bool:
        """Whether ``path`` is a symlink."""
        found = self.stat(path)
        return found is not None and found.is_symlink

    def readlink(self, path: str) -> str | None:
        """A symlink's target, or None when ``path`` is not a symlink."""
        found = self.stat(path)
        return found.target if found is not None and found.is_symlink else None

    def read_bytes(self, path: str) -> bytes | None:
        """A file's contents (symlinks followed), or None when ``path`` names no file."""
        try:
            found = self._tree.stat(ROOT, "/", path)
            if found.kind != "file":
                return None
            return self._tree.read(self._tree.open(ROOT, "/", path, write=False))
        except FsError:
            return None

    def listdir(self, path: str) -> list[str]:
        """The names in a directory, sorted, without ``.`` and ``..``.

        Raises:
            FileNotFoundError: no such directory.
        """
        try:
            names = self._tree.listdir(ROOT, "/", path)
        except FsError as exc:
            raise FileNotFoundError(path) from exc
        return sorted(names[2:])

    def walk(self) -> list[FileStat]:
        """Every entry of the tree, ordered by path."""
        return self._tree.entries()


# -- what differs between releases -------------------------------------------------------


@attrs.frozen(kw_only=True)
class ToyboxRelease:
    """What the toybox of one Android release does differently, where the fence can see it.

    Android 10 and 11 are read in LineageOS ``android_external_toybox`` (``lineage-17.1``:
    upstream 0.8.0 of 2019-02-20; ``lineage-18.1``: upstream of 2020-02-28), built and run.
    No tree of 12 to 15 is at hand; they follow upstream releases 0.8.4 to 0.8.11, and where
    the snapshot is unknown the behaviour worse for a caller is chosen (see
    ``mkdir_existing_dir_succeeds``).
    """

    #: The upstream toybox the release's ``external/toybox`` corresponds to.
    snapshot: str
    #: ``ln -t DIR`` and ``ln -T`` exist (upstream 0.8.2, ``lineage-18.1``); on Android 10
    #: ``ln -T`` is ``Unknown option T``.
    ln_target_options: bool
    #: ``ls NAME`` of a dangling symlink prints the name (``dirtree_add_node`` retries with
    #: ``AT_SYMLINK_NOFOLLOW``, upstream 0.8.3 era, ``lineage-18.1``); on Android 10 it fails
    #: with ``ls: NAME: No such file or directory``, exit 1.
    ls_lists_dangling_symlinks: bool
    #: ``ls -R DIR/`` titles the directory ``DIR:`` (upstream 0.8.4); before, ``DIR/:``.
    ls_title_strips_slash: bool
    #: ``mkdir DIR`` of an existing directory exits 0 silently: upstream ``mkpathat`` from
    #: "install -D was broken when the target file exists" (2021-02-08) to "mkdir: return
    #: error for existing directories without -p flag" (2021-10-18, reported from Samsung),
    #: i.e. release 0.8.5. Android 12 was cut inside that window; its snapshot is not at
    #: hand, so 12 is modelled with the bug (the worse case: ``mkdir`` then claims nothing
    #: against a directory).
    mkdir_existing_dir_succeeds: bool
    #: ``Unknown option 'x'`` with quotes (upstream 0.8.2); Android 10 prints ``Unknown
    #: option x``.
    quoted_unknown_option: bool
    #: ``readlink`` takes several names (upstream 0.8.2); Android 10: ``Max 1 argument``.
    readlink_many: bool
    #: ``rm`` refuses a path whose last component is ``..`` (``rm: bad path X``) and says
    #: ``Needs 1 argument (see "rm --help")`` (``lineage-18.1``); Android 10 does neither.
    rm_checks_dotdot: bool
    #: ``rmdir --ignore-fail-on-non-empty`` exists (``lineage-18.1``).
    rmdir_ignore_fail: bool
    #: ``ls`` lays out columns (a terminal's ``-C``/``-x``) as 0.8.0 did: one space between
    #: columns and padding after the last, before upstream's "ls cleanup" of 2019-11-08.
    ls_old_columns: bool = False
    #: ``rm -f NAME`` first tries a plain ``unlink(NAME)`` and is done when that worked or
    #: said ``ENOENT`` (no ``-v`` line then); from upstream's "Minor tweak" of 2021-02-01 it
    #: only skips a name ``lstat`` cannot find (``lineage-17.1``, ``lineage-18.1``: unlink).
    rm_force_unlinks_first: bool = False


TOYBOX_RELEASES: Final = {
    10: ToyboxRelease(
        snapshot="0.8.0 (lineage-17.1, upstream 2019-02-20)",
        ln_target_options=False,
        ls_lists_dangling_symlinks=False,
        ls_title_strips_slash=False,
        mkdir_existing_dir_succeeds=False,
        quoted_unknown_option=False,
        readlink_many=False,
        rm_checks_dotdot=False,
        rmdir_ignore_fail=False,
        ls_old_columns=True,
        rm_force_unlinks_first=True,
    ),
    11: ToyboxRelease(
        snapshot="0.8.2+ (lineage-18.1, upstream 2020-02-28)",
        ln_target_options=True,
        ls_lists_dangling_symlinks=True,
        ls_title_strips_slash=False,
        mkdir_existing_dir_succeeds=False,
        quoted_unknown_option=True,
        readlink_many=True,
        rm_checks_dotdot=True,
        rmdir_ignore_fail=True,
        rm_force_unlinks_first=True,
    ),
    12: ToyboxRelease(
        snapshot="0.8.4+ (upstream 2021, inside the mkdir regression window)",
        ln_target_options=True,
        ls_lists_dangling_symlinks=True,
        ls_title_strips_slash=True,
        mkdir_existing_dir_succeeds=True,
        quoted_unknown_option=True,
        readlink_many=True,
        rm_checks_dotdot=True,
        rmdir_ignore_fail=True,
    ),
}
for _version in (13, 14, 15):
    TOYBOX_RELEASES[_version] = attrs.evolve(
        TOYBOX_RELEASES[12],
        snapshot={13: "0.8.6+", 14: "0.8.9+", 15: "0.8.11+"}[_version],
        mkdir_existing_dir_succeeds=False,
    )


def toybox_release(version: int) -> ToyboxRelease:
    """The toybox behaviours of Android ``version`` (10 to 15).

    Raises:
        ValueError: a release the simulator does not model.
    """
    try:
        return TOYBOX_RELEASES[version]
    except KeyError:
        raise ValueError(f"no toybox modelled for Android {version}") from None


# -- toybox argument parsing (lib/args.c) ------------------------------------------------


class _Exit(Exception):
    """``error_exit``/``help_exit``: the message is already written; stop with ``status``."""

    def __init__(self, status: int = 1) -> None:
        super().__init__(status)
        self.status = status


@attrs.frozen(kw_only=True)
class _Spec:
    """One tool's option string, as ``NEWTOY`` declares it."""

    name: str
    #: Flag letters that take no argument.
    flags: str = ""
    #: Letters (and long-only names) that take an argument (``m:``).
    with_argument: frozenset[str] = frozenset()
    #: ``--long`` names and the flag each sets (a long-only flag is its own name).
    longs: Mapping[str, str] = attrs.field(factory=dict)
    #: ``[-abc]`` groups: setting one switches the others off.
    last_wins: tuple[str, ...] = ()
    #: Flags toybox has that the simulator does not model: refused, saying so.
    unmodelled: frozenset[str] = frozenset()
    minimum: int = 0
    maximum: int | None = None


class _Writer:
    """Collects a tool's stdout and stderr in order."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.chunks: list[tuple[int, str]] = []
        self.status = 0

    def out(self, text: str) -> None:
        if text:
            self.chunks.append((1, text))

    def err(self, text: str) -> None:
        if text:
            self.chunks.append((2, text))

    def error(self, message: str) -> None:
        """``error_msg``: ``name: message``, status 1."""
        self.err(f"{self.name}: {message}\n")
        self.status = self.status or 1

    def perror(self, message: str | None, errno: int) -> None:
        """``perror_msg``: ``name: message: strerror``, status 1."""
        text = STRERROR.get(errno, f"Unknown error {errno}")
        self.error(f"{message}: {text}" if message is not None else text)

    def help_exit(self, message: str) -> _Exit:
        """``help_exit``: the message and ``(see "name --help")``, status 1."""
        self.err(f'{self.name}: {message} (see "{self.name} --help")\n')
        return _Exit(1)

    def result(self) -> Output:
        return Output(tuple(self.chunks), self.status)


def _parse(
    spec: _Spec, argv: Sequence[str], writer: _Writer, toybox: ToyboxRelease
) -> tuple[dict[str, str | bool], list[str]]:
    """Parse ``argv`` as toybox's ``get_optflags``: options anywhere, ``--`` ends them, a
    lone ``-`` is an argument, ``-abc`` is ``-a -b -c``, ``-mMODE`` and ``-m MODE``.

    Raises:
        _Exit: an unknown option, a missing argument, too few or too many arguments.
    """
    options: dict[str, str | bool] = {}
    positional: list[str] = []
    index = 1
    stop = False

    def unknown(rest: str) -> _Exit:
        shown = f"'{rest}'" if toybox.quoted_unknown_option else rest
        return writer.help_exit(f"Unknown option {shown}")

    def set_flag(flag: str, value: str | bool) -> None:
        if flag in spec.unmodelled:
            writer.err(f"{spec.name}: -{flag}: not modelled by the simulator\n")
            raise _Exit(1)
        for group in spec.last_wins:
            if flag in group:
                for other in group:
                    options.pop(other, None)
        options[flag] = value

    while index < len(argv):
        arg = argv[index]
        index += 1
        if stop or arg == "-" or not arg.startswith("-"):
            positional.append(arg)
            continue
        if arg == "--":
            stop = True
            continue
        if arg.startswith("--"):
            body = arg[2:]
            name, equals, value = body.partition("=")
            if name == "help":
                writer.err(f"{spec.name}: --help: not modelled by the simulator\n")
                raise _Exit(1)
            matches = [long for long in spec.longs if long.startswith(name)]
            exact = [long for long in matches if long == name]
            if len(exact) == 1:
                matches = exact
            if len(matches) != 1:
                raise unknown(body)
            flag = spec.longs[matches[0]]
            if flag in spec.with_argument:
                if not equals:
                    if index >= len(argv):
                        raise writer.help_exit(f"Missing argument to --{matches[0]}")
                    value = argv[index]
                    index += 1
                set_flag(flag, value)
            else:
                set_flag(flag, True)
            continue
        cluster = arg[1:]
        position = 0
        while position < len(cluster):
            letter = cluster[position]
            if letter in spec.with_argument:
                value = cluster[position + 1 :]
                if not value:
                    if index >= len(argv):
                        raise writer.help_exit(f"Missing argument to -{letter}")
                    value = argv[index]
                    index += 1
                set_flag(letter, value)
                break
            if letter not in spec.flags and letter not in spec.unmodelled:
                raise unknown(cluster[position:])
            set_flag(letter, True)
            position += 1
    if len(positional) < spec.minimum:
        plural = "s" if spec.minimum > 1 else ""
        raise writer.help_exit(f"Need{'' if plural else 's'} {spec.minimum} argument{plural}")
    if spec.maximum is not None and len(positional) > spec.maximum:
        plural = "s" if spec.maximum > 1 else ""
        raise writer.help_exit(f"Max {spec.maximum} argument{plural}")
    return options, positional


def _basename(path: str) -> str:
    """POSIX ``basename`` as bionic's: trailing slashes dropped, ``/`` stays ``/``."""
    stripped = path.rstrip("/")
    if not stripped:
        return "/" if path else "."
    return stripped.rsplit("/", 1)[-1]


def string_to_mode(text: str, mode: int) -> int | None:
    """toybox ``string_to_mode``: an octal mode or ``[ugoa]*[=+-][rwxXst]*|[ugo]`` clauses
    separated by commas, applied to ``mode``; None when toybox says ``bad mode``."""
    if text[:1].isdigit():
        if any(char not in "01234567" for char in text):
            return None
        value = int(text, 8)
        return None if value & ~0o7777 else value
    whos, hows, whats, whys = "ogua", "=+-", "xwrstX", "ogu"
    position = 0
    while True:
        who = 0
        while position < len(text) and text[position] in whos:
            who |= 1 << whos.index(text[position])
            position += 1
        if not who:
            who = 8  # like "a", honouring the umask (0 under adbd)
        if position >= len(text) or text[position] not in hows:
            return None
        how = text[position]
        position += 1
        what = 0
        while position < len(text) and text[position] in whats:
            what |= 1 << whats.index(text[position])
            position += 1
        if what & 32 and (statmod.S_ISDIR(mode) or mode & 0o111):
            what |= 1
        if not what and position < len(text) and text[position] in whys:
            what = (mode >> (3 * whys.index(text[position]))) & 7
            position += 1
        if position < len(text):
            if text[position] != ",":
                return None
            position += 1
        for category in range(4):
            for bit_index in range(3):
                where = 1 << (3 * category + bit_index)
                bit = False
                if category == 3:
                    if bit_index:
                        bit = bool(what & 8 and who & (8 | (1 << category)))
                    else:
                        bit = bool(what & 16)
                else:
                    if not who & (8 | (1 << category)):
                        continue
                    bit = bool(what & (1 << bit_index))
                if how == "=" or (bit and how == "-"):
                    mode &= ~where
                if bit and how != "-":
                    mode |= where
        if position >= len(text):
            return mode


def mode_string(info: FileStat) -> str:
    """``mode_to_string``: ``drwxr-xr-x``, with ``s``/``S`` and ``t``/``T``."""
    kind = {"dir": "d", "file": "-", "symlink": "l"}[info.kind]
    out = [kind]
    for shift, special, letter in ((6, 0o4000, "s"), (3, 0o2000, "s"), (0, 0o1000, "t")):
        bits = (info.mode >> shift) & 7
        out.append("r" if bits & 4 else "-")
        out.append("w" if bits & 2 else "-")
        if info.mode & special:
            out.append(letter if bits & 1 else letter.upper())
        else:
            out.append("x" if bits & 1 else "-")
    return "".join(out)


@attrs.frozen
class _Node:
    """A ``struct dirtree`` entry: its name as given or read, the path that reaches it, its
    lstat/stat, its parent, and whether it hangs below ``ls``'s unnamed top node."""

    name: str
    path: str
    info: FileStat | None
    parent: _Node | None = None
    listed: bool = False

    def display_path(self, toybox: ToyboxRelease) -> str:
        """``dirtree_path``: the names from the top joined by ``/``; from upstream 0.8.4 one
        trailing ``/`` of each name is dropped first (``a/`` titles ``a:``, before ``a/:``)."""
        names: list[str] = []
        node: _Node | None = self
        while node is not None:
            names.append(node.name)
            node = node.parent
        names.reverse()
        if toybox.ls_title_strips_slash:
            if len(names) == 1 and not self.listed:
                return self.name
            return "/".join(name[:-1] if name.endswith("/") else name for name in names if name)
        path = ""
        for name in names:
            if path and not path.endswith("/"):
                path += "/"
            path += name
        return path


@attrs.define(eq=False)
class OpenFile:
    """An open file description (``struct file``): its inode, its offset and ``O_APPEND``;
    what a redirection writes to or reads from."""

    tree: FileTree
    ino: int
    append: bool = False
    offset: int = 0

    def write(self, text: str) -> None:
        """``write(2)`` at the offset (at the end with ``O_APPEND``)."""
        data = text.encode("utf-8", "surrogateescape")
        self.offset = self.tree.write(self.ino, self.offset, data, append=self.append)

    def read(self) -> str:
        """``read(2)`` from the offset to the end.

        Raises:
            RedirectFailed: a directory (``EISDIR``).
        """
        try:
            data = self.tree.read(self.ino)[self.offset :]
        except FsError as exc:
            raise RedirectFailed(exc.strerror) from exc
        self.offset += len(data)
        return data.decode("utf-8", "surrogateescape")


class FileCommands:
    """The toybox file tools and mksh's ``test``, as one process (``cred``, ``cwd``) runs
    them on the phone's tree; and the files its shell's redirections open (``open``)."""

    def __init__(
        self,
        tree: FileTree,
        *,
        cred: Credentials,
        toybox: ToyboxRelease,
        zone: Callable[[], ZoneInfo],
        cwd: str = "/",
    ) -> None:
        self.tree = tree
        self.cred = cred
        self.toybox = toybox
        self.cwd = cwd
        self._zone = zone

    def commands(self) -> dict[str, CommandFn]:
        """The tools by name, for the shell's command table."""
        return {
            "ln": self.ln,
            "ls": self.ls,
            "mkdir": self.mkdir,
            "readlink": self.readlink,
            "rm": self.rm,
            "rmdir": self.rmdir,
            "test": self.test,
            "[": self.test,
            "touch": self.touch,
            "cat": self.cat,
        }

    def open(self, path: str, how: str) -> OpenFile:
        """``open(2)`` for a shell redirection (see ``_shell.ShellFiles``): ``>`` truncates
        or creates, ``>>`` appends or creates, ``<>`` creates or opens as it is, ``<``
        reads.

        Raises:
            RedirectFailed: the open failed (bionic's ``strerror`` text).
        """
        write = how != "<"
        try:
            ino = self.tree.open(
                self.cred, self.cwd, path, write=write, create=write, truncate=how == ">"
            )
        except FsError as exc:
            raise RedirectFailed(exc.strerror) from exc
        return OpenFile(self.tree, ino, append=how == ">>")

    # -- system call helpers ---------------------------------------------------------

    def _stat(self, path: str, *, follow: bool) -> FileStat:
        if follow:
            return self.tree.stat(self.cred, self.cwd, path)
        return self.tree.lstat(self.cred, self.cwd, path)

    def _try_stat(self, path: str, *, follow: bool) -> FileStat | None:
        try:
            return self._stat(path, follow=follow)
        except FsError:
            return None

    # -- mkdir -----------------------------------------------------------------------

    async def mkdir(self, argv: list[str], stdin: str) -> Output:
        """``mkdir [-pv] [-m MODE] DIR...`` (``toys/posix/mkdir.c``, ``mkpathat`` in
        ``lib/lib.c``): ``mkdir: 'DIR': <error>`` and status 1 for each failure, the rest
        still made. Without ``-p`` an existing name fails with ``File exists``, whatever it is
        (a dangling symlink too), except an existing directory on Android 12 (see
        :class:`ToyboxRelease`). With ``-p`` every missing parent is made (mode 0777 under
        adbd's umask 0) and an existing directory is fine. ``-m`` applies to the last
        component only. A failed parent is named as far as it got (``mkdir -p a/b/c`` ->
        ``mkdir: 'a/b': Permission denied``)."""
        writer = _Writer("mkdir")
        spec = _Spec(
            name="mkdir",
            flags="vp",
            with_argument=frozenset("mZ"),
            longs={"parent": "p", "parents": "p"},
            unmodelled=frozenset("Z"),
            minimum=1,
        )
        try:
            options, names = _parse(spec, argv, writer, self.toybox)
            mode = 0o777
            if "m" in options:
                parsed = string_to_mode(str(options["m"]), 0o777 | statmod.S_IFDIR)
                if parsed is None:
                    writer.error(f"bad mode '{options['m']}'")
                    raise _Exit(1)
                mode = parsed & 0o7777
            for name in names:
                failed = self._mkpathat(
                    name, mode, parents="p" in options, verbose="v" in options, writer=writer
                )
                if failed is not None:
                    shown, errno = failed
                    writer.perror(f"'{shown}'", errno)
        except _Exit as stop:
            writer.status = stop.status
        return writer.result()

    def _mkpathat(
        self, path: str, mode: int, *, parents: bool, verbose: bool, writer: _Writer
    ) -> tuple[str, int] | None:
        """``mkpathat(AT_FDCWD, path, mode, MKLAST|(p ? MAKE : 0)|(v ? VERBOSE : 0))``;
        returns (the path as far as it got, errno) on failure."""
        existing = self._try_stat(path, follow=True)
        if existing is not None:
            if not existing.is_dir:
                return path, EEXIST
            if parents or self.toybox.mkdir_existing_dir_succeeds:
                return None
            return path, EEXIST
        if parents:
            for position in range(1, len(path)):
                if path[position] != "/":
                    continue
                prefix = path[:position]
                try:
                    self.tree.mkdir(self.cred, self.cwd, prefix, 0o777 | 0o300)
                except FsError as exc:
                    if exc.errno != EEXIST:
                        return prefix, exc.errno
                else:
                    if verbose:
                        writer.err(f"mkdir: created directory '{prefix}'\n")
        try:
            self.tree.mkdir(self.cred, self.cwd, path, mode)
        except FsError as exc:
            if not parents or exc.errno != EEXIST:
                return path, exc.errno
        else:
            if verbose:
                writer.err(f"mkdir: created directory '{path}'\n")
        return None

    # -- ln --------------------------------------------------------------------------

    async def ln(self, argv: list[str], stdin: str) -> Output:
        """``ln [-sfnv] [-T] [-t DIR] TARGET... LINK`` (``toys/posix/ln.c``).

        ``ln -s TARGET NAME`` calls ``symlink(2)``, which fails with ``File exists`` when
        NAME exists, whatever it is: ``ln: cannot create symbolic link from 'TARGET' to
        'NAME': File exists``, status 1. But first ``ln`` ``stat``s NAME (following
        symlinks; ``lstat`` with ``-n`` or ``-T``): when NAME is a directory, or a symlink to
        one, the link is made *inside* it, as ``NAME/basename(TARGET)``, and ``ln`` exits 0.
        ``-T`` refuses a directory (``ln: 'NAME' is a directory``), but Android 10 has no
        ``-T``. ``-f`` replaces through a temporary name and ``rename(2)``. Without ``-s``,
        a hard link (``link(2)``; a directory: ``Operation not permitted``).
        """
        writer = _Writer("ln")
        targets = self.toybox.ln_target_options
        spec = _Spec(
            name="ln",
            flags="vnfs" + ("T" if targets else ""),
            with_argument=frozenset("t" if targets else ""),
            unmodelled=frozenset("r" if targets else ""),
            minimum=1,
        )
        try:
            options, args = _parse(spec, argv, writer, self.toybox)
            if "T" in options and len(args) > 2:
                raise writer.help_exit("Max 2 arguments")
            if "t" in options:
                destination = str(options["t"])
                sources = args
            else:
                destination = args[-1]
                sources = args[:-1]
            if not sources:
                sources = [destination]
                destination = "."
            no_follow = "n" in options or "T" in options
            info = self._try_stat(destination, follow=not no_follow)
            into_directory = info is not None and info.is_dir
            if targets:
                if info is not None:
                    if into_directory and "T" in options:
                        writer.error(f"'{destination}' is a directory")
                        raise _Exit(1)
                    if not into_directory and (len(sources) > 1 or "t" in options):
                        writer.error(f"'{destination}' not a directory")
                        raise _Exit(1)
            elif not into_directory and len(sources) > 1:
                writer.error(f"'{destination}' not a directory")
                raise _Exit(1)
            for source in sources:
                self._link_one(source, destination, into_directory, options, writer)
        except _Exit as stop:
            writer.status = stop.status
        return writer.result()

    def _link_one(
        self,
        source: str,
        destination: str,
        into_directory: bool,
        options: Mapping[str, str | bool],
        writer: _Writer,
    ) -> None:
        new = f"{destination}/{_basename(source)}" if into_directory else destination
        symbolic = "s" in options
        final = new
        if "f" in options:
            # mkstemp beside the name, unlink it, make the link there, rename it over.
            temporary = f"{new}_{_random_suffix()}"
            try:
                self.tree.create_file(self.cred, self.cwd, temporary)
            except FsError:
                pass
            else:
                try:
                    self.tree.unlink(self.cred, self.cwd, temporary)
                except FsError as exc:
                    writer.perror(f"unlink '{temporary}'", exc.errno)
            new = temporary
        errno = 0
        try:
            if symbolic:
                self.tree.symlink(self.cred, self.cwd, source, new)
            else:
                self.tree.link(self.cred, self.cwd, source, new)
        except FsError as exc:
            errno = exc.errno
        if "f" in options:
            if not errno:
                try:
                    self.tree.rename(self.cred, self.cwd, new, final)
                except FsError as exc:
                    errno = exc.errno
                    try:
                        self.tree.unlink(self.cred, self.cwd, new)
                    except FsError as unlink_error:
                        writer.perror(f"unlink '{new}'", unlink_error.errno)
            new = final
        if errno:
            kind = "symbolic" if symbolic else "hard"
            writer.perror(f"cannot create {kind} link from '{source}' to '{new}'", errno)
        elif "v" in options:
            writer.err(f"'{new}' -> '{source}'\n")

    # -- readlink --------------------------------------------------------------------

    async def readlink(self, argv: list[str], stdin: str) -> Output:
        """``readlink [-efmnq] FILE...`` (``toys/other/readlink.c``): a symlink's target, or
        status 1 and no message (not a symlink, missing). ``-f`` the canonical path (every
        component but the last must exist), ``-e`` all must, ``-m`` none; ``-n`` no newline.
        Android 10 takes one name only. (``-v``/``-z`` of toybox 0.8.9 are not modelled.)"""
        writer = _Writer("readlink")
        spec = _Spec(
            name="readlink",
            flags="nqmef",
            longs={"canonicalize": "f"},
            last_wins=("mef",),
            minimum=1,
            maximum=None if self.toybox.readlink_many else 1,
        )
        try:
            options, names = _parse(spec, argv, writer, self.toybox)
            for name in names:
                result: str | None
                if "f" in options or "e" in options or "m" in options:
                    missing = 0 if "f" in options else (1 if "e" in options else -1)
                    result = self.tree.realpath(self.cred, self.cwd, name, missing=missing)
                else:
                    try:
                        result = self.tree.readlink(self.cred, self.cwd, name)
                    except FsError:
                        result = None
                if result is None:
                    writer.status = 1
                elif "q" not in options:
                    writer.out(result + ("" if "n" in options else "\n"))
        except _Exit as stop:
            writer.status = stop.status
        return writer.result()

    # -- rm and rmdir ----------------------------------------------------------------

    async def rm(self, argv: list[str], stdin: str) -> Output:
        """``rm [-fiRrv] FILE...`` (``toys/posix/rm.c``): ``rm: NAME: <error>``, status 1.
        A directory needs ``-r`` (``Is a directory``); ``-f`` is silent about missing names
        and makes unreadable directories readable first; ``-r`` empties and removes a
        directory (a symlink is removed, never followed); nested failures name only the
        entry. ``/`` is refused (``rm /. if you mean it``), and from Android 11 a last
        component ``..`` (``bad path X``). ``-v`` prints ``rm 'X'``/``rmdir 'X'``. Prompts
        (``-i``, or a read-only file on a terminal) read the answer from stdin: from the
        terminal nobody types into, that waits until it is hung up, and the answer is then
        no (see ``_shell.read_input``)."""
        writer = _Writer("rm")
        spec = _Spec(name="rm", flags="fiRrv", last_wins=("fi",))
        try:
            options, names = _parse(spec, argv, writer, self.toybox)
            if not names and "f" not in options:
                if self.toybox.rm_checks_dotdot:
                    raise writer.help_exit("Needs 1 argument")
                writer.error("Needs 1 argument")
                raise _Exit(1)
            answers = _Answers(stdin)
            for name in names:
                if name == "/":
                    writer.error("rm /. if you mean it")
                    continue
                if self.toybox.rm_checks_dotdot and _basename(name) == "..":
                    writer.error(f"bad path {name}")
                    continue
                if "f" in options and self.toybox.rm_force_unlinks_first:
                    try:
                        self.tree.unlink(self.cred, self.cwd, name)
                    except FsError as exc:
                        if exc.errno == ENOENT:
                            continue
                    else:
                        continue
                elif "f" in options:
                    try:
                        self._stat(name, follow=False)
                    except FsError as exc:
                        if exc.errno == ENOENT:
                            continue
                try:
                    info = self._stat(name, follow=False)
                except FsError as exc:
                    writer.perror(name, exc.errno)
                    continue
                await self._rm_node(_Node(name, name, info), options, writer, answers)
        except _Exit as stop:
            writer.status = stop.status
        return writer.result()

    async def _rm_node(
        self,
        node: _Node,
        options: Mapping[str, str | bool],
        writer: _Writer,
        answers: _Answers,
    ) -> bool:
        """``do_rm`` for one node and, for a directory, its contents (``dirtree_read``
        order: the directory is visited again after its entries). Returns True when the
        node was not deleted (``nodelete``: the parent then says nothing of its own
        ``Directory not empty``)."""
        if node.name in (".", ".."):
            return False
        assert node.info is not None
        is_dir = node.info.is_dir
        force = "f" in options
        recursive = "r" in options or "R" in options
        marked = unstattable = False
        if is_dir and not recursive:
            return self._unlink_node(
                node, is_dir=False, marked=False, options=options, writer=writer
            )
        read_only = False
        if not force and not node.info.is_symlink:
            try:
                self.tree.access(self.cred, self.cwd, node.path, 2)
            except FsError as exc:
                if exc.errno == ENOENT:
                    return self._unlink_node(
                        node, is_dir=is_dir, marked=False, options=options, writer=writer
                    )
                read_only = True
        # adbd gives a legacy shell one PTY for stdin and stdout: isatty(0) follows stdout.
        if (read_only and STDOUT_IS_TERMINAL.get()) or "i" in options:
            writer.err(
                f"rm {'ro ' if read_only else ''}{'dir ' if is_dir else ''}"
                f"{node.display_path(self.toybox)}"
            )
            if not await _yesno(writer, answers):
                return True
        if is_dir:
            try:
                self.tree.access(self.cred, self.cwd, node.path, 4)
            except FsError:
                if force:
                    self._chmod_0700(node, writer)
                else:
                    return self._unlink_node(
                        node, is_dir=True, marked=False, options=options, writer=writer
                    )
            try:
                names = self.tree.listdir(self.cred, self.cwd, node.path)
            except FsError as exc:
                # dirtree_recurse: the directory cannot be opened; it is left alone.
                writer.perror(node.display_path(self.toybox), exc.errno)
                return False
            for child_name in names:
                if child_name in (".", ".."):
                    continue
                child_path = f"{node.path.rstrip('/')}/{child_name}"
                try:
                    child_info = self._stat(child_path, follow=False)
                except FsError as exc:
                    writer.perror(f"{node.display_path(self.toybox)}/{child_name}", exc.errno)
                    unstattable = True
                    continue
                child = _Node(child_name, child_path, child_info, node)
                if await self._rm_node(child, options, writer, answers):
                    marked = True
            if "i" in options and not (marked or unstattable):
                writer.err(f"rmdir {node.display_path(self.toybox)}")
                if not await _yesno(writer, answers):
                    return True
        return self._unlink_node(node, is_dir=is_dir, marked=marked, options=options, writer=writer)

    def _unlink_node(
        self,
        node: _Node,
        *,
        is_dir: bool,
        marked: bool,
        options: Mapping[str, str | bool],
        writer: _Writer,
    ) -> bool:
        """``unlinkat(fd, name, dir ? AT_REMOVEDIR : 0)``; True when it failed."""
        try:
            if is_dir:
                self.tree.rmdir(self.cred, self.cwd, node.path)
            else:
                self.tree.unlink(self.cred, self.cwd, node.path)
        except FsError as exc:
            if not (is_dir and marked):
                writer.perror(node.name, exc.errno)
            return True
        if "v" in options:
            kind = "rmdir" if is_dir else "rm"
            writer.out(f"{kind} '{node.display_path(self.toybox)}'\n")
        return False

    def _chmod_0700(self, node: _Node, writer: _Writer) -> None:
        """``wfchmodat(fd, name, 0700)``: only the owner or root may."""
        assert node.info is not None
        if self.cred.root or self.cred.uid == node.info.uid:
            self.tree.chmod(self.cred, self.cwd, node.path, 0o700)
        else:
            writer.perror(f"chmod '{node.name}' to 0700", EPERM)

    async def rmdir(self, argv: list[str], stdin: str) -> Output:
        """``rmdir [-p] [--ignore-fail-on-non-empty] DIR...`` (``toys/posix/rmdir.c``):
        ``rmdir: DIR: <error>``, status 1 (a symlink: ``Not a directory``; entries left:
        ``Directory not empty``). ``-p`` removes the parents named in DIR too."""
        writer = _Writer("rmdir")
        longs = {"parents": "p"} if self.toybox.rmdir_ignore_fail else {}
        if self.toybox.rmdir_ignore_fail:
            longs["ignore-fail-on-non-empty"] = "ignore-fail-on-non-empty"
        spec = _Spec(name="rmdir", flags="p", longs=longs, minimum=1)
        try:
            options, names = _parse(spec, argv, writer, self.toybox)
            for name in names:
                current = name
                while True:
                    try:
                        self.tree.rmdir(self.cred, self.cwd, current)
                    except FsError as exc:
                        if not ("ignore-fail-on-non-empty" in options and exc.errno == ENOTEMPTY):
                            writer.perror(current, exc.errno)
                        break
                    if not options:
                        break
                    while True:
                        slash = current.rfind("/")
                        if slash < 0:
                            current = ""
                            break
                        tail = current[slash + 1 :]
                        current = current[:slash]
                        if tail:
                            break
                    if not current:
                        break
        except _Exit as stop:
            writer.status = stop.status
        return writer.result()

    # -- touch -----------------------------------------------------------------------

    async def touch(self, argv: list[str], stdin: str) -> Output:
        """``touch [-achm] [-r FILE] FILE...`` (``toys/posix/touch.c``): set the
        modification time to now (or FILE's), creating an empty file (mode 0666) where the
        name does not exist (``-c``: don't); a dangling symlink creates its target. Failure:
        ``touch: 'NAME': <error>``, status 1. Access times are not modelled; ``-d``/``-t``
        (date parsing) are refused as not modelled."""
        writer = _Writer("touch")
        spec = _Spec(
            name="touch",
            flags="acfmh",
            with_argument=frozenset("rdt"),
            unmodelled=frozenset("dt"),
            minimum=1,
        )
        try:
            options, names = _parse(spec, argv, writer, self.toybox)
            mtime: int | None = None
            if "r" in options:
                reference = str(options["r"])
                try:
                    mtime = self._stat(reference, follow=True).mtime_ns
                except FsError as exc:
                    writer.perror(f"Can't stat {reference}", exc.errno)
                    raise _Exit(1) from exc
            only_access = "a" in options and "m" not in options
            follow = "h" not in options
            for name in names:
                if name == "-":
                    continue
                try:
                    if not only_access:
                        self.tree.set_mtime(self.cred, self.cwd, name, mtime, follow=follow)
                    else:
                        self._stat(name, follow=follow)
                    continue
                except FsError as exc:
                    errno = exc.errno
                if "c" in options:
                    continue
                exists = self._try_stat(name, follow=True) is not None
                if not exists:
                    try:
                        self.tree.create_file(self.cred, self.cwd, name)
                    except FsError as exc:
                        errno = exc.errno
                    else:
                        if mtime is not None and not only_access:
                            self.tree.set_mtime(self.cred, self.cwd, name, mtime, follow=True)
                        continue
                writer.perror(f"'{name}'", errno)
        except _Exit as stop:
            writer.status = stop.status
        return writer.result()

    # -- ls --------------------------------------------------------------------------

    async def ls(self, argv: list[str], stdin: str) -> Output:
        """``ls [-1aACdFlnpRrtx] [--show-control-chars] [PATH...]`` (``toys/posix/ls.c``).

        Names sorted bytewise; a directory named alone lists its contents, several get a
        ``NAME:`` title each (after the other names); ``-d`` shows a directory itself;
        ``-a`` shows ``.`` and ``..`` and dot names, ``-A`` dot names; ``-l`` the long form
        (``drwxrwxrwx 2 shell shell 4096 2024-05-01 12:00 name``, ``-> target`` for a
        symlink, ``total N`` in KiB for a directory); ``-n`` numeric ids. A missing name:
        ``ls: NAME: No such file or directory``, status 1; an unreadable directory:
        ``ls: NAME: Permission denied``. Without ``-l``/``-d`` a symlink is followed: a
        dangling one is missing on Android 10, shown as itself from 11.

        When stdout is a terminal (an adb ``shell:`` PTY, see ``STDOUT_IS_TERMINAL``) ``ls``
        prints columns 80 wide (``-C``) and escapes spaces and backslashes (``-b``), as
        toybox does for ``isatty(1)``; in a pipe or ``$(...)`` one name per line (``-1``).
        """
        writer = _Writer("ls")
        spec = _Spec(
            name="ls",
            flags="1aACdFlnpRrtxbq",
            longs={"show-control-chars": "show-control-chars", "color": "color"},
            with_argument=frozenset({"color"}),
            last_wins=("Cx1", "Cxl", "Cxn", "qb", "ft"),
            unmodelled=frozenset("ZgoHLSchikmsuUfw@N"),
        )
        try:
            options, names = _parse(spec, argv, writer, self.toybox)
            if "color" in options:
                writer.err("ls: --color: not modelled by the simulator\n")
                raise _Exit(1)
            flags = set(options)
            long_form = "l" in flags or "n" in flags
            if STDOUT_IS_TERMINAL.get():
                if "show-control-chars" not in flags:
                    flags.add("b")
                if long_form:
                    flags.add("1")
                elif not flags & {"1", "x"}:
                    flags.add("C")
            else:
                flags.add("1")
            if "d" in flags:
                flags.discard("R")
            listing = _Listing(self, flags, writer, self._zone())
            top: list[_Node] = []
            for name in names or ["."]:
                follow = not (long_form or flags & {"d", "F"})
                try:
                    info = self._stat(name, follow=follow)
                except FsError as exc:
                    errno = exc.errno
                    info = None
                    if follow and errno == ENOENT and self.toybox.ls_lists_dangling_symlinks:
                        info = self._try_stat(name, follow=False)
                    if info is None:
                        writer.perror(name, errno)
                        continue
                top.append(_Node(name, name, info))
            listing.top(top)
        except _Exit as stop:
            writer.status = stop.status
        return writer.result()

    # -- cat -------------------------------------------------------------------------

    async def cat(self, argv: list[str], stdin: str) -> Output:
        """``cat [-u] [FILE...]`` (``toys/posix/cat.c`` with ``loopfiles`` in ``lib/lib.c``,
        toybox 0.8.0 to 0.8.11): each FILE's bytes in turn, stdin for ``-`` or no FILE. A
        FILE that cannot be opened or read prints ``cat: FILE: <strerror>`` (a directory:
        ``Is a directory``) and makes the status 1; the others are still printed. ``-v``,
        ``-t`` and ``-e`` are not modelled."""
        writer = _Writer("cat")
        spec = _Spec(name="cat", flags="u", unmodelled=frozenset("vte"))
        try:
            _options, names = _parse(spec, argv, writer, self.toybox)
            for name in names or ["-"]:
                if name == "-":
                    # read to its end (the terminal: nothing, once it is hung up; EIO for a
                    # read waiting then: ``do_cat``'s ``perror_msg_raw``); a second ``-``
                    # then sees EOF at once
                    try:
                        writer.out(await read_input(stdin))
                    except TerminalReadError:
                        writer.perror(name, EIO)
                    stdin = ""
                    continue
                try:
                    data = self.tree.read(self.tree.open(self.cred, self.cwd, name, write=False))
                except FsError as exc:
                    writer.perror(name, exc.errno)
                    continue
                writer.out(data.decode("utf-8", "surrogateescape"))
        except _Exit as stop:
            writer.status = stop.status
        return writer.result()

    # -- test and [ (mksh builtins) ----------------------------------------------------

    async def test(self, argv: list[str], stdin: str) -> Output:
        """mksh's ``test`` and ``[`` (``funcs.c`` ``c_test``, R59c): POSIX's special cases for
        0 to 4 arguments, else the ``-o``/``-a``/``!``/``( )`` grammar. File operators
        ``-e -a -f -d -L -h -r -w -x -s -u -g -k -O -G -nt -ot -ef`` against the tree (``-L``
        with ``lstat``; ``-r/-w/-x`` with ``access(2)``); strings ``-n -z = == != < >``;
        integers ``-eq -ne -lt -le -gt -ge`` (decimal, ``base#digits``, empty is 0). Status
        0 true, 1 false, 2 for an error (``[: missing ]``, ``X: unexpected operator/operand``,
        ``X: missing argument``...). Not modelled, answered false: ``-v`` (shell variables),
        ``-o`` (shell options), ``-b -c -p -S -H`` (no such files); ``-t FD`` is true for 0 to
        2 on a terminal. A name operand of ``-eq`` is not evaluated (0)."""
        return _TestRun(self, argv).run()


def _random_suffix() -> str:
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    return "".join(secrets.choice(alphabet) for _ in range(6))


class _Answers:
    """What prompts read from stdin, a line at a time, read when first asked for: from the
    terminal that waits until it is hung up, then gives nothing (``fgetc`` sees EOF or EIO)."""

    def __init__(self, stdin: str) -> None:
        self._stdin = stdin
        self._lines: Iterator[str] | None = None

    async def next(self) -> str:
        """The next line ("" at the end)."""
        if self._lines is None:
            try:
                text = await read_input(self._stdin)
            except TerminalReadError:
                text = ""
            self._lines = iter(text.split("\n"))
        return next(self._lines, "")


async def _yesno(writer: _Writer, answers: _Answers) -> bool:
    """``yesno(0)``: `` (y/N):`` on stderr, then the answer from stdin (none: no; from the
    terminal, none once it is hung up, and only then)."""
    writer.err(" (y/N):")
    answer = await answers.next()
    result = False
    for char in answer:
        if char.isspace():
            break
        lowered = char.lower()
        if lowered in "ny":
            result = lowered == "y"
    return result


class _Listing:
    """``listfiles`` of ``toys/posix/ls.c`` (upstream 0.8.4 to 0.8.11 layout; Android 10's
    0.8.0 pads columns a space differently in a few layouts, not modelled)."""

    def __init__(
        self, commands: FileCommands, flags: set[str], writer: _Writer, zone: ZoneInfo
    ) -> None:
        self._commands = commands
        self._flags = flags
        self._writer = writer
        self._zone = zone
        self._titled = 0
        self._single: _Node | None = None
        self._long = "l" in flags or "n" in flags
        self._escape_more = " \\" if "b" in flags else ""

    def top(self, nodes: list[_Node]) -> None:
        """The names given on the command line (or ``.``)."""
        nodes = [attrs.evolve(node, listed=True) for node in nodes]
        flags = self._flags
        if (
            len(nodes) == 1
            and nodes[0].info is not None
            and nodes[0].info.is_dir
            and not flags & {"d", "R"}
        ):
            self._single = nodes[0]
            self._directory(nodes[0])
            return
        ordered = self._print(nodes, top=True)
        if "d" in flags:
            return
        for node in ordered:
            if node.info is not None and node.info.is_dir:
                self._directory(node)

    def _directory(self, node: _Node) -> None:
        commands = self._commands
        try:
            names = commands.tree.listdir(commands.cred, commands.cwd, node.path)
        except FsError as exc:
            self._writer.perror(node.name, exc.errno)
            return
        children: list[_Node] = []
        for name in names:
            if "a" not in self._flags:
                if "A" not in self._flags and name.startswith("."):
                    continue
                if name in (".", ".."):
                    continue
            child_path = f"{node.path.rstrip('/')}/{name}" if node.path != "/" else f"/{name}"
            try:
                info = commands.tree.lstat(commands.cred, commands.cwd, child_path)
            except FsError as exc:
                self._writer.perror(f"{node.display_path(commands.toybox)}/{name}", exc.errno)
                continue
            children.append(_Node(name, child_path, info, node, listed=True))
        if self._single is not node or "R" in self._flags:
            if self._titled:
                self._writer.out("\n")
            self._titled += 1
            self._writer.out(f"{node.display_path(commands.toybox)}:\n")
        ordered = self._print(children, top=False)
        if "R" not in self._flags:
            return
        for child in ordered:
            if child.info is not None and child.info.is_dir and child.name not in (".", ".."):
                self._directory(child)

    # -- layout ---------------------------------------------------------------------

    def _compare(self, left: _Node, right: _Node) -> int:
        result = 0
        if "t" in self._flags:
            assert left.info is not None and right.info is not None
            if left.info.mtime_ns != right.info.mtime_ns:
                result = -1 if left.info.mtime_ns > right.info.mtime_ns else 1
        if not result:
            a = left.name.encode("utf-8", "surrogateescape")
            b = right.name.encode("utf-8", "surrogateescape")
            result = (a > b) - (a < b)
        return -result if "r" in self._flags else result

    def _escaped(self, name: str) -> str:
        """``crunch_str`` with ``crunch_qb``: ``-b`` escapes, ``-q`` question marks."""
        if "b" not in self._flags and "q" not in self._flags:
            return name
        out: list[str] = []
        for char in name:
            if char in self._escape_more:
                out.append("\\" + char)
            elif ord(char) < 0x20 or ord(char) == 0x7F:
                if "q" in self._flags:
                    out.append("?")
                else:
                    table = "\\\a\b\x1b\f\n\r\t\v"
                    index = table.find(char)
                    out.append("\\" + "\\abefnrtv"[index] if index >= 0 else f"\\{ord(char):03o}")
            else:
                out.append(char)
        return "".join(out)

    def _end_type(self, info: FileStat) -> str:
        if ("F" in self._flags or "p" in self._flags) and info.is_dir:
            return "/"
        if "F" in self._flags:
            if info.is_symlink:
                return "@"
            if info.kind == "file" and info.mode & 0o111:
                return "*"
        return ""

    def _user(self, uid: int) -> str:
        return str(uid) if "n" in self._flags else user_name(uid)

    def _lengths(self, node: _Node) -> list[int]:
        """``entrylen``: the name's width, then the long form's field widths."""
        assert node.info is not None
        info = node.info
        lengths = [0] * 8
        lengths[0] = len(self._escaped(node.name)) + len(self._end_type(info))
        if self._long:
            lengths[2] = len(str(info.nlink))
            lengths[3] = len(self._user(info.uid))
            lengths[4] = len(self._user(info.gid))
            lengths[5] = len(str(info.size))
        return lengths

    def _next_column(self, index: int, count: int, columns: int) -> tuple[int, int]:
        """``next_column``: (entry shown at position ``index``, its column)."""
        if "C" not in self._flags:
            return index, index % columns
        height = (count + columns - 1) // columns
        extra = count % height
        if extra and index >= extra * columns:
            index -= extra * columns
            columns -= 1
        else:
            extra = 0
        column = index % columns
        return column * height + extra + index // columns, column

    def _print(self, nodes: list[_Node], *, top: bool) -> list[_Node]:
        """Print one directory's entries (or the top names); return them sorted."""
        if self._commands.toybox.ls_old_columns and self._flags & {"C", "x"}:
            return self._print_old_columns(nodes, top=top)
        writer = self._writer
        ordered = sorted(nodes, key=functools.cmp_to_key(self._compare))
        count = len(ordered)
        totals = [0] * 8
        blocks = 0
        last_lengths = [0] * 8
        for node in ordered:
            last_lengths = self._lengths(node)
            totals = [max(pair) for pair in zip(totals, last_lengths, strict=True)]
            assert node.info is not None
            blocks += 4 if node.info.is_dir else 0
        if self._long and not top:
            writer.out(f"total {blocks}\n")
        screen_width = 80
        columns = 1024
        column_sizes: list[int] = []
        if self._flags & {"C", "x"}:
            columns = min(columns, screen_width // 2, count)
            while columns > 1:
                column_sizes = [0] * columns
                total = columns
                index = 0
                while index < count:
                    shown, column = self._next_column(index, count, columns)
                    if shown >= count:
                        break
                    last_lengths = self._lengths(ordered[shown])
                    if column < columns - 1:
                        last_lengths[0] += 2
                    if last_lengths[0] > column_sizes[column]:
                        total += last_lengths[0] - column_sizes[column]
                        column_sizes[column] = last_lengths[0]
                        if total > screen_width:
                            break
                    index += 1
                if index == count:
                    break
                columns -= 1
            if columns <= 1:
                columns = max(columns, 1)
                column_sizes = column_sizes or [0]
        width = 0
        for index in range(count):
            shown, column = self._next_column(index, count, max(columns, 1))
            node = ordered[shown]
            info = node.info
            assert info is not None
            last_name = last_lengths[0]
            if info.is_dir and top and "d" not in self._flags:
                continue
            self._titled = 1
            last_lengths = self._lengths(node)
            if index:
                if self._flags & {"C", "x"}:
                    if not column:
                        writer.out("\n")
                    else:
                        _, previous = self._next_column(index - 1, count, max(columns, 1))
                        pad = column_sizes[previous] - last_name
                        writer.out(" " * max(abs(pad), 1))
                elif "1" in self._flags or width + 1 + last_lengths[0] > screen_width:
                    writer.out("\n")
                    width = 0
                else:
                    writer.out("  ")
                    width += 2
            width += last_lengths[0]
            writer.out(self._entry(node, totals))
        if width:
            writer.out("\n")
        return ordered

    def _old_next_column(self, index: int, count: int, columns: int) -> tuple[int, int]:
        """0.8.0's ``next_column``; a column of ``columns`` means the layout cannot work."""
        if "C" not in self._flags:
            return index, index % columns
        height = (count + columns - 1) // columns
        if height * columns - count >= height:
            return 0, columns
        wide = count % height or height
        transition = wide * columns
        if index < transition:
            column = index % columns
            return column * height + index // columns, column
        index -= transition
        column = index % (columns - 1)
        return column * height + wide + index // (columns - 1), column

    def _print_old_columns(self, nodes: list[_Node], *, top: bool) -> list[_Node]:
        """Android 10's (toybox 0.8.0) column layout for a terminal's ``-C``/``-x``."""
        writer = self._writer
        ordered = sorted(nodes, key=functools.cmp_to_key(self._compare))
        count = len(ordered)
        screen_width = 80
        columns = min(1024, screen_width // 2, count)
        sizes: list[int] = [0] * max(columns, 1)
        while columns > 1:
            sizes = [0] * (columns + 1)
            total = columns
            index = 0
            while index < count:
                shown, column = self._old_next_column(index, count, columns)
                length = self._lengths(ordered[shown])[0] + 1
                if column == columns:
                    break
                if length > sizes[column]:
                    total += length - sizes[column]
                    sizes[column] = length
                    if total > screen_width:
                        break
                index += 1
            if index == count:
                break
            columns -= 1
        columns = max(columns, 1)
        width = 0
        for index in range(count):
            shown, column = self._old_next_column(index, count, columns)
            node = ordered[shown]
            assert node.info is not None
            if node.info.is_dir and top and "d" not in self._flags:
                continue
            self._titled = 1
            length = self._lengths(node)[0]
            if index and not column:
                writer.out("\n")
            width += length
            writer.out(self._entry(node, [0] * 8))
            pad = sizes[column] - length if column < len(sizes) else -1
            if 0 <= pad < 255:
                writer.out(" " * max(pad, 1))
        if width:
            writer.out("\n")
        return ordered

    def _entry(self, node: _Node, totals: Sequence[int]) -> str:
        info = node.info
        assert info is not None
        parts: list[str] = []
        if self._long:
            parts.append(mode_string(info))
            parts.append(str(info.nlink).rjust(totals[2] + 1))
            parts.append(" " + self._escaped(self._user(info.uid)).ljust(totals[3]))
            parts.append(" " + self._escaped(self._user(info.gid)).ljust(totals[4]))
            parts.append(str(info.size).rjust(totals[5] + 1))
            moment = datetime.fromtimestamp(info.mtime_ns / 1e9, tz=self._zone)
            parts.append(moment.strftime(" %Y-%m-%d %H:%M").rjust(17) + " ")
        parts.append(self._escaped(node.name))
        if self._long and info.is_symlink:
            parts.append(f" -> {info.target}")
        parts.append(self._end_type(info))
        return "".join(parts)


_UNARY: Final = frozenset(
    [
        "-a",
        "-b",
        "-c",
        "-d",
        "-e",
        "-f",
        "-G",
        "-g",
        "-H",
        "-h",
        "-k",
        "-L",
        "-n",
        "-O",
        "-o",
        "-p",
        "-r",
        "-S",
        "-s",
        "-t",
        "-u",
        "-v",
        "-w",
        "-x",
        "-z",
    ]
)
_BINARY: Final = frozenset(
    ["=", "==", "!=", "<", ">", "-eq", "-ne", "-gt", "-ge", "-lt", "-le", "-ef", "-nt", "-ot"]
)
_NUMBER: Final = re.compile(r"\s*([+-]?)\s*(?:(\d+)#([0-9A-Za-z@_]+)|(\d+))\s*")
_NAME: Final = re.compile(r"\s*[A-Za-z_][A-Za-z0-9_]*\s*")


class _TestError(Exception):
    """``te->flags |= TEF_ERROR``: the message is out; status 2."""


class _TestRun:
    """One run of mksh's ``c_test`` (``test``/``[``)."""

    def __init__(self, commands: FileCommands, argv: Sequence[str]) -> None:
        self._commands = commands
        self._name = argv[0].rsplit("/", 1)[-1]
        self._words = list(argv[1:])
        self._position = 0
        self._messages: list[str] = []
        self._error = False

    def run(self) -> Output:
        if self._name == "[":
            if not self._words or self._words[-1] != "]":
                return Output.err(f"{SHELL_NAME}: [: missing ]\n", 2)
            self._words.pop()
        try:
            status = self._special()
            if status is None:
                self._position = 0
                status = self._parse()
        except _TestError:
            status = 2
        chunks = tuple((2, message) for message in self._messages)
        return Output(chunks, 2 if self._error else status)

    # -- POSIX's special cases for 0 to 4 arguments -----------------------------------

    def _special(self) -> int | None:
        words = self._words
        invert = 0
        state = len(words)
        op: str
        while True:
            if state == 0:
                return 1
            if state == 1:
                op = "-n"
                break
            if state == 2:
                if words[self._position] == "!":
                    invert += 1
                    self._position += 1
                    state = 1
                    continue
                if words[self._position] in _UNARY:
                    op = words[self._position]
                    self._position += 1
                    break
                return None
            if state == 3:
                lhs = words[self._position]
                middle = words[self._position + 1]
                rhs = words[self._position + 2]
                if middle in _BINARY:
                    truth = self._eval(middle, lhs, rhs)
                    return self._finish(truth, invert)
                if middle in ("-a", "-o"):
                    left = self._eval("-n", lhs, None)
                    right = self._eval("-n", rhs, None)
                    truth = (left and right) if middle == "-a" else (left or right)
                    return self._finish(truth, invert)
                if lhs == "!":
                    invert += 1
                    self._position += 1
                    state = 2
                    continue
                if lhs == "(" and rhs == ")":
                    self._position += 1
                    state = 1
                    continue
                return None
            if state == 4:
                if words[self._position] == "!":
                    invert += 1
                    self._position += 1
                    state = 3
                    continue
                if words[self._position] == "(" and words[self._position + 3] == ")":
                    self._position += 1
                    state = 2
                    continue
                return None
            return None
        truth = self._eval(op, words[self._position], None)
        self._position += 1
        return self._finish(truth, invert)

    def _finish(self, truth: bool, invert: int) -> int:
        if self._error:
            return 2
        return int(truth) if invert & 1 else int(not truth)

    # -- the general grammar -------------------------------------------------------------

    def _at(self, token: str) -> bool:
        if self._position < len(self._words) and self._words[self._position] == token:
            self._position += 1
            return True
        return False

    def _fail(self, offset: int, message: str) -> None:
        self._error = True
        index = self._position + offset
        word = self._words[index] if 0 <= index < len(self._words) else None
        text = f"{word}: {message}" if word is not None else message
        self._messages.append(f"{SHELL_NAME}: {self._name}: {text}\n")

    def _parse(self) -> int:
        truth = self._or(True)
        if not self._error and self._position < len(self._words):
            self._fail(0, "unexpected operator/operand")
        return 2 if self._error else int(not truth)

    def _or(self, evaluate: bool) -> bool:
        truth = self._and(evaluate)
        if truth:
            evaluate = False
        if not self._error and self._at("-o"):
            return self._or(evaluate) or truth
        return truth

    def _and(self, evaluate: bool) -> bool:
        truth = self._not(evaluate)
        if not truth:
            evaluate = False
        if not self._error and self._at("-a"):
            return self._and(evaluate) and truth
        return truth

    def _not(self, evaluate: bool) -> bool:
        if not self._error and self._at("!"):
            return not self._not(evaluate)
        return self._primary(evaluate)

    def _operand(self, op: str | None) -> str | None:
        if self._position >= len(self._words):
            return "1" if op == "-t" else None
        word = self._words[self._position]
        self._position += 1
        return word

    def _primary(self, evaluate: bool) -> bool:
        if self._error:
            return False
        if self._at("("):
            truth = self._or(evaluate)
            if self._error:
                return False
            if not self._at(")"):
                self._fail(0, "missing )")
                return False
            return truth
        words = self._words
        if (
            self._position + 1 < len(words)
            and words[self._position + 1] not in _BINARY
            and words[self._position] in _UNARY
        ):
            op = words[self._position]
            self._position += 1
            operand = self._operand(op)
            if operand is None:
                self._fail(-1, "missing argument")
                return False
            return self._eval(op, operand, None) if evaluate else False
        first = self._operand(None)
        if first is None:
            self._fail(0, "expression expected")
            return False
        if self._position < len(words) and words[self._position] in _BINARY:
            op = words[self._position]
            self._position += 1
            second = self._operand(op)
            if second is None:
                self._fail(-1, "missing second argument")
                return False
            return self._eval(op, first, second) if evaluate else False
        return self._eval("-n", first, None) if evaluate else False

    # -- test_eval -----------------------------------------------------------------------

    def _stat(self, path: str, *, follow: bool = True) -> FileStat | None:
        return self._commands._try_stat(path, follow=follow)

    def _access(self, path: str, want: int) -> bool:
        commands = self._commands
        try:
            commands.tree.access(commands.cred, commands.cwd, path, want)
        except FsError:
            return False
        return True

    def _number(self, text: str) -> int:
        """mksh ``evaluate`` for the integers a test compares (32-bit, as ``mksh_ari_t``)."""
        if not text.strip():
            return 0
        match = _NUMBER.fullmatch(text)
        if match is None:
            if _NAME.fullmatch(text):
                return 0
            self._error = True
            expression = text.strip()
            self._messages.append(f"{SHELL_NAME}: {expression}: bad number '{expression}'\n")
            raise _TestError
        sign, base_text, digits, decimal = match.groups()
        if decimal is not None:
            value = int(decimal)
        else:
            base = int(base_text)
            try:
                value = int(digits, base) if 2 <= base <= 36 else int("x")
            except ValueError:
                self._error = True
                expression = text.strip()
                self._messages.append(f"{SHELL_NAME}: {expression}: bad number '{expression}'\n")
                raise _TestError from None
        value = -value if sign == "-" else value
        value &= 0xFFFFFFFF
        return value - (1 << 32) if value & 0x80000000 else value

    def _eval(self, op: str, first: str, second: str | None) -> bool:
        commands = self._commands
        if op == "-n":
            return first != ""
        if op == "-z":
            return first == ""
        if op in ("-v", "-o", "-b", "-c", "-p", "-S", "-H"):
            return False
        if op == "-r":
            return self._access(first, 4)
        if op == "-w":
            return self._access(first, 2)
        if op == "-x":
            return self._access(first, 1)
        if op == "-t":
            if not re.fullmatch(r"\s*[+-]?\d+\s*", first):
                # bi_getn: bi_errorf("%s: %s", "bad number", X).
                self._error = True
                self._messages.append(f"{SHELL_NAME}: {self._name}: bad number: {first}\n")
                return False
            return int(first) in (0, 1, 2) and STDOUT_IS_TERMINAL.get()
        if op in ("-L", "-h"):
            found = self._stat(first, follow=False)
            return found is not None and found.is_symlink
        if op in _UNARY:
            found = self._stat(first)
            if found is None:
                return False
            checks: dict[str, Callable[[FileStat], bool]] = {
                "-e": lambda info: True,
                "-a": lambda info: True,
                "-f": lambda info: info.kind == "file",
                "-d": lambda info: info.is_dir,
                "-u": lambda info: bool(info.mode & 0o4000),
                "-g": lambda info: bool(info.mode & 0o2000),
                "-k": lambda info: bool(info.mode & 0o1000),
                "-s": lambda info: info.size > 0,
                "-O": lambda info: info.uid == commands.cred.uid,
                "-G": lambda info: info.gid == commands.cred.gid,
            }
            return checks[op](found)
        assert second is not None
        if op in ("=", "=="):
            return first == second
        if op == "!=":
            return first != second
        if op in ("<", ">"):
            left = first.encode("utf-8", "surrogateescape")
            right = second.encode("utf-8", "surrogateescape")
            return left < right if op == "<" else left > right
        if op in ("-nt", "-ot", "-ef"):
            one = self._stat(first)
            two = self._stat(second)
            if op == "-nt":
                return one is not None and (two is None or one.mtime_ns > two.mtime_ns)
            if op == "-ot":
                return two is not None and (one is None or one.mtime_ns < two.mtime_ns)
            return one is not None and two is not None and one.ino == two.ino
        left_number = self._number(first)
        right_number = self._number(second)
        comparisons: dict[str, Callable[[int, int], bool]] = {
            "-eq": lambda a, b: a == b,
            "-ne": lambda a, b: a != b,
            "-gt": lambda a, b: a > b,
            "-ge": lambda a, b: a >= b,
            "-lt": lambda a, b: a < b,
            "-le": lambda a, b: a <= b,
        }
        return comparisons[op](left_number, right_number)
