"""kvforensics: replay prefill scheduling rounds from logs and explain KV out-of-memory crashes.

Data flows one way: log files -> events (``logs``) -> rounds (``rounds``) -> ledgers per
policy (``model``, ``replay``) -> verdict/diff -> report (``report``). ``exec`` re-runs the
replayed plan on real KV tensors.
"""

__version__ = "0.1.0"
