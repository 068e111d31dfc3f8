"""The policy pipeline: filters -> scorer -> picker, each a small plugin."""
