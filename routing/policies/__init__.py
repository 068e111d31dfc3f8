"""Routing policies: Meridian's predicted-TTFT router and the baselines it is compared with."""
