"""``python -m kvforensics.replay._checker``: the second process of a replay
(``checks.Remote``), on its standard input and output."""

import signal
import sys

from kvforensics.replay.checks import serve

if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # an interrupt is the parent's to handle
    serve(sys.stdin.buffer, sys.stdout.buffer)
