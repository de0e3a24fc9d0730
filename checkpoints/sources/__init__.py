"""Where checkpoints come from and go back to: the agents' file formats and uploaded archives of them.

Nothing here writes to the database: `services.file_import` stores what a format reads, and restores are
written back through a format's `write_back` by `services.recovery`.
"""
