"""`kvforensics simulate`: run a scenario through the admission model."""
