"""An independent simulator of a PD prefill node, used as ground truth for the replay's
counterfactual answers. It shares no code with ``kvforensics``: its own admission rules
(written from the fork's behaviour), its own event loop and its own log rendering."""
