"""Does nothing but print its first line: isolates the platform's and the toolkit's own cost."""
import socket
import time

print(f"BENCH_FIRST_LINE {time.time():.6f} {socket.gethostname()} 0", flush=True)
