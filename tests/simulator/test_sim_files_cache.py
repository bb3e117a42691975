"""The rows FileTree keeps between system calls: what another connection to the store file
writes is seen at the next call, and so is every write of the tree's own, a failed one not.
"""

from __future__ import annotations

import multiprocessing
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from android_bridge.simulator._files import ENOENT, ROOT, FileTree, FsError
from android_bridge.simulator._store import SmsStore

DIR = "/data/local/tmp/starebrain"
NAME = f"{DIR}/d-1"


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A store file as the phone makes it (WAL mode, by the SMS store), booted."""
    path = tmp_path / "sms.db"
    SmsStore(path).close()
    tree = FileTree(path, clock_ns=lambda: 0)
    tree.boot()
    tree.mkdir(ROOT, "/", DIR, 0o777)
    tree.close()
    return path


@pytest.fixture
def tree(store: Path) -> Iterator[FileTree]:
    opened = FileTree(store, clock_ns=lambda: 0)
    yield opened
    opened.close()


def _other_tree(store: str, name: str) -> None:
    """Another process's system calls on the same store file."""
    tree = FileTree(Path(store), clock_ns=lambda: 7)
    try:
        tree.unlink(ROOT, "/", name)
        tree.mkdir(ROOT, "/", name, 0o700)
    finally:
        tree.close()


def test_another_process_writing_the_store_is_seen(store: Path, tree: FileTree) -> None:
    """A name another process replaced (a symlink unlinked, a directory made in its place) is
    the new one at this tree's next call, though this tree had just read the old one."""
    tree.symlink(ROOT, "/", "void", NAME)
    assert "symlink" == tree.lstat(ROOT, "/", NAME).kind
    assert "symlink" == tree.lstat(ROOT, "/", NAME).kind
    context = multiprocessing.get_context("spawn")
    worker = context.Process(target=_other_tree, args=(str(store), NAME))
    worker.start()
    worker.join(timeout=60)
    assert 0 == worker.exitcode
    seen = tree.lstat(ROOT, "/", NAME)
    assert ("dir", 0o700) == (seen.kind, seen.mode)
    assert [".", "..", "d-1"] == tree.listdir(ROOT, "/", DIR)


def test_another_connection_writing_the_table_is_seen(store: Path, tree: FileTree) -> None:
    """A plain SQLite connection's change to a kept row (a mode, a name gone) is seen."""
    tree.mkdir(ROOT, "/", NAME, 0o777)
    assert 0o777 == tree.stat(ROOT, "/", NAME).mode
    with sqlite3.connect(store) as other:
        other.execute("UPDATE files SET mode = 448 WHERE path = ?", (NAME,))
    assert 0o700 == tree.stat(ROOT, "/", NAME).mode
    with sqlite3.connect(store) as other:
        other.execute("DELETE FROM files WHERE path = ?", (NAME,))
    with pytest.raises(FsError) as gone:
        tree.stat(ROOT, "/", NAME)
    assert ENOENT == gone.value.errno


def test_another_tree_in_this_process_is_seen(store: Path, tree: FileTree) -> None:
    """Two trees on one file (two connections, as two simulators on one store would have):
    a file one makes, writes and removes is seen by the other at each step."""
    other = FileTree(store, clock_ns=lambda: 5)
    try:
        with pytest.raises(FsError):
            tree.lstat(ROOT, "/", NAME)
        ino = other.open(ROOT, "/", NAME, write=True, create=True)
        other.write(ino, 0, b"hello", append=False)
        assert (5, 5) == (tree.stat(ROOT, "/", NAME).size, tree.stat(ROOT, "/", DIR).mtime_ns)
        assert b"hello" == tree.read(ino)
        other.write(ino, 5, b", world", append=False)
        assert b"hello, world" == tree.read(ino)
        other.mkdir(ROOT, "/", f"{DIR}/sub", 0o777)
        assert 3 == tree.stat(ROOT, "/", DIR).nlink
        other.unlink(ROOT, "/", NAME)
        with pytest.raises(FsError):
            tree.lstat(ROOT, "/", NAME)
    finally:
        other.close()


def test_own_writes_are_seen(tmp_path: Path, store: Path) -> None:
    """Each write of the tree's own shows in its next calls: a new name and its directory's
    time, a write's size and time on every name of the inode, a mode, a name gone."""
    clock = iter(range(100, 200))
    tree = FileTree(store, clock_ns=lambda: next(clock))
    try:
        assert 2 == tree.stat(ROOT, "/", DIR).nlink
        before = tree.stat(ROOT, "/", DIR).mtime_ns
        ino = tree.open(ROOT, "/", NAME, write=True, create=True)
        made = tree.stat(ROOT, "/", DIR).mtime_ns
        assert made > before
        tree.link(ROOT, "/", NAME, f"{DIR}/other")
        assert tree.stat(ROOT, "/", DIR).mtime_ns > made
        tree.write(ino, 0, b"abc", append=False)
        written = tree.stat(ROOT, "/", NAME)
        linked = tree.stat(ROOT, "/", f"{DIR}/other")
        assert (3, 3, 2) == (written.size, linked.size, linked.nlink)
        assert written.mtime_ns == linked.mtime_ns > made
        tree.chmod(ROOT, "/", f"{DIR}/other", 0o600)
        assert 0o600 == tree.stat(ROOT, "/", NAME).mode
        tree.set_mtime(ROOT, "/", NAME, 42, follow=True)
        assert 42 == tree.stat(ROOT, "/", f"{DIR}/other").mtime_ns
        tree.open(ROOT, "/", f"{DIR}/other", write=True, truncate=True)
        assert 0 == tree.stat(ROOT, "/", NAME).size
        tree.mkdir(ROOT, "/", f"{DIR}/gone", 0o777)
        assert 3 == tree.stat(ROOT, "/", DIR).nlink
        tree.rmdir(ROOT, "/", f"{DIR}/gone")
        assert 2 == tree.stat(ROOT, "/", DIR).nlink
        tree.mkdir(ROOT, "/", f"{DIR}/sub", 0o777)
        assert 3 == tree.stat(ROOT, "/", DIR).nlink
        tree.rename(ROOT, "/", f"{DIR}/sub", f"{DIR}/moved")
        assert [".", "..", "d-1", "moved", "other"] == tree.listdir(ROOT, "/", DIR)
        tree.unlink(ROOT, "/", NAME)
        with pytest.raises(FsError):
            tree.lstat(ROOT, "/", NAME)
        assert 1 == tree.stat(ROOT, "/", f"{DIR}/other").nlink
        tree.rmdir(ROOT, "/", f"{DIR}/moved")
        assert 2 == tree.stat(ROOT, "/", DIR).nlink
        tree.clear_children(DIR)
        assert [".", ".."] == tree.listdir(ROOT, "/", DIR)
    finally:
        tree.close()
    assert [] == [entry.path for entry in _fresh_entries(store) if entry.path.startswith(DIR + "/")]


def _fresh_entries(store: Path) -> list[object]:
    fresh = FileTree(store, clock_ns=lambda: 0)
    try:
        return list(fresh.entries())
    finally:
        fresh.close()


def test_a_write_that_failed_half_way_leaves_nothing_kept(store: Path) -> None:
    """A system call that fails after its first statement is rolled back, and the tree
    keeps nothing of what it had written: the name it was removing is still there."""
    failing = False

    def clock() -> int:
        if failing:
            raise RuntimeError("clock gone")
        return 0

    tree = FileTree(store, clock_ns=clock)
    try:
        tree.symlink(ROOT, "/", "void", NAME)
        assert "symlink" == tree.lstat(ROOT, "/", NAME).kind
        failing = True
        with pytest.raises(RuntimeError):
            # the row is deleted, then the directory's time fails
            tree.unlink(ROOT, "/", NAME)
        failing = False
        assert "void" == tree.readlink(ROOT, "/", NAME)
    finally:
        tree.close()


def test_inode_numbers_and_unlinked_inodes_as_the_table_says(tree: FileTree) -> None:
    """The next inode is the highest in the table plus one, so removing the newest name
    gives its number to the next; a write to an inode whose names are all gone keeps
    nothing, and reading it gives nothing."""
    first = tree.open(ROOT, "/", NAME, write=True, create=True)
    tree.write(first, 0, b"abc", append=False)
    assert b"abc" == tree.read(first)
    tree.unlink(ROOT, "/", NAME)
    assert b"" == tree.read(first)
    tree.write(first, 3, b"def", append=False)
    assert b"" == tree.read(first)
    again = tree.open(ROOT, "/", f"{DIR}/again", write=True, create=True)
    assert first == again
    assert b"" == tree.read(again)
    fresh = FileTree(tree.path, clock_ns=lambda: 0)
    try:
        assert fresh.stat(ROOT, "/", f"{DIR}/again") == tree.stat(ROOT, "/", f"{DIR}/again")
    finally:
        fresh.close()
