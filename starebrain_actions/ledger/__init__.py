"""The ledger: durable receipts on SQLite or PostgreSQL, compare-and-set transitions,
history, the read path that needs no event loop, copying a ledger, and the schemas.
``store`` holds the ``Ledger`` class, composed of one module per responsibility; its
docstring maps them."""
