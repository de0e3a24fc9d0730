"""Demo data: agents whose checkpoints look like real runs (used by `manage.py seed_demo`)."""
