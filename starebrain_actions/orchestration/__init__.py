"""What drives sends over time: the agent (``SmsAgent``), the reconciler that settles
in-flight attempts by reading phones, and the nightly job."""
