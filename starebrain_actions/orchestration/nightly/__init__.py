"""The nightly job: one reconciliation pass over every busy device, then a report for people.

Run by cron as ``starebrain nightly`` (or ``scripts/nightly_reconcile.py``). It only *reads*
phones (through ``reconcile_pending``), never sends. It is safe to start twice: an OS file
lock (``fcntl.flock`` on ``<ledger>.nightly.lock``) lets one run work while a second one
says so and leaves; the kernel drops the lock when its holder dies, so a crash never wedges
later nights. On PostgreSQL (a ``postgresql://`` URL) the lock is the ledger's advisory lock
``nightly`` instead (``Ledger.exclusive``), held across hosts and dropped by the server when
its holder's connection ends; no file is made. A device that cannot be reached is reported,
never fatal.

The report holds no phone numbers and no bodies: it is meant to be archived (and committed).

Its rooms: ``run`` (the pass and what it reads), ``lock`` (the file lock and the busy
error), ``report`` (the report's records and how they are built from the ledger), ``text``
(the summary on stdout and the Markdown copy) and ``archive`` (the JSON file and the
Markdown archive, committed to git).
"""
