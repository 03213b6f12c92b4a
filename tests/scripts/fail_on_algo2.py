"""Fails with ZeroDivisionError on algo-2; algo-1 blocks in a collective that never completes."""

import os
import socket
import time

if socket.gethostname() == "algo-2":
    time.sleep(1)
    print(1 / 0)
else:
    time.sleep(600)  # a peer stuck waiting; the emulator must stop it
print(os.environ["SM_CURRENT_HOST"])
