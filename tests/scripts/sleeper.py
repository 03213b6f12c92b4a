"""Prints READY, then sleeps: a host that never finishes on its own."""

import time

print("READY", flush=True)
time.sleep(600)
