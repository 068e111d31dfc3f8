"""Fleet simulator: the real routing policies over the emulator's engine model, in virtual time.

``meridian sim SCENARIO.yaml`` replays one seeded request trace per policy through a
discrete-event loop (no asyncio, no sleeping) and compares TTFT, end-to-end time, prefix-cache
hits, load balance and calibration side by side.
"""
