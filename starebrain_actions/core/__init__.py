"""The pure core: the two-axis model, its legal transitions, the decisions over them
(redispatch, attribution, the policy gate's judgement) and the one cattrs converter. No I/O:
nothing here imports the ledger, the phone, asyncio or logging (a checked contract)."""
