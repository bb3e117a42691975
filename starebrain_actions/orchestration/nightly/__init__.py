"""The nightly job: one reconciliation pass over every busy device, then a report for people."""
