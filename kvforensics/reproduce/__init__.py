"""Reproduce stage: from a replayed incident (or a scenario) to the smallest scenario that
still shows the same cause, and a regression test against SGLang's own adder.

Sits after ``replay``: it reads a ``ReplayResult``'s start state and causes, never the
other way round."""
