"""The adapter to ``android_bridge``: the ``Phone`` port the orchestration drives, and the
choice of send path per phone. The only place above the core that talks to a phone."""
