"""Conversations (``threads``) as TelephonyProvider keeps them: a deleted conversation's id."""

from __future__ import annotations

from pathlib import Path

from android_bridge.simulator._store import SmsStore

A, B, C = "+12025550100", "+12025550101", "+12025550102"


def _thread_of(store: SmsStore, address: str) -> int:
    row_id = store.insert_outgoing(address, "hi", date_ms=1_700_000_000_000)
    row = store.row(row_id)
    assert row is not None and row.thread_id is not None
    return row.thread_id


def test_a_deleted_conversations_thread_id_is_never_given_again(tmp_path: Path) -> None:
    """``threads._id`` is INTEGER PRIMARY KEY AUTOINCREMENT (MmsSmsDatabaseHelper,
    android-10.0.0_r30 to 15.0.0_r1): once the latest conversation is deleted, a new one
    gets a new id, and so does the next message to the same recipient (the thread went with
    its last message: ``updateThreads``)."""
    store = SmsStore(tmp_path / "sms.db")
    first, latest = _thread_of(store, A), _thread_of(store, B)
    assert _thread_of(store, A) == first  # one conversation per recipient set
    store.delete_conversation(latest)
    assert latest not in store.threads()
    newer = _thread_of(store, C)
    again = _thread_of(store, B)
    assert latest < newer < again
    store.close()


def test_without_autoincrement_the_latest_deleted_thread_id_goes_to_the_next(
    tmp_path: Path,
) -> None:
    """A database from before AUTOINCREMENT whose optional upgrade failed (storage short:
    ``upgradeThreadsTableToAutoIncrement``) keeps ``INTEGER PRIMARY KEY``: the deleted
    latest conversation's id goes to the next new conversation, another recipient's."""
    store = SmsStore(tmp_path / "sms.db", threads_autoincrement=False)
    _thread_of(store, A)
    latest = _thread_of(store, B)
    store.delete_conversation(latest)
    assert latest == _thread_of(store, C)
    store.close()


def test_a_group_is_one_conversation_whatever_the_order(tmp_path: Path) -> None:
    """``recipient_ids`` are the canonical address ids sorted (``MmsSmsProvider.getThreadId``):
    a group is one thread whatever order its recipients come in, and not any member's."""
    store = SmsStore(tmp_path / "sms.db")
    group = store.thread_id_for([A, B])
    assert group == store.thread_id_for([B, A])
    assert group not in (store.thread_id_for(A), store.thread_id_for(B))
    store.close()
