"""Does nothing but record that it ran: isolates the platform's and the toolkit's own cost."""
import time

STARTED = time.time()

from marks import mark  # noqa: E402

mark("first", STARTED)
