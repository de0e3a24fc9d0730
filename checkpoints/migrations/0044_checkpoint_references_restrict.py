"""Every foreign key naming a checkpoint (a session's head and fork source, a checkpoint's parent, alerts, audit rows,
secret findings, recovery items, LangGraph rows) refuses the checkpoint's deletion when the DELETE runs (`ON DELETE
RESTRICT`), not at commit (Django's `NO ACTION DEFERRABLE`).

Whoever deletes a checkpoint clears or re-points these references first (`services.cleanup`, Django's collector,
which runs its SET_NULL updates before its deletes), so the answer is the same; the check is half the work: for a
deferred `NO ACTION` PostgreSQL first looks whether another row now holds the deleted key, then for referencing
rows, one lookup each per deleted row and constraint; `RESTRICT` does only the second. With twelve constraints
naming a checkpoint, that first lookup was a quarter of a retention batch's time (docs/benchmarks.md,
"Retention beside writers").

The constraints keep their names and their deferred check on insert and update (a session and its first
checkpoint still name each other within a transaction); PostgreSQL only: SQLite's foreign keys are checked at
commit either way.
"""

from django.db import migrations

REFERENCES = [
    ("AgentSession", "head"),
    ("AgentSession", "forked_from"),
    ("Checkpoint", "parent"),
    ("DriftAlert", "checkpoint"),
    ("DriftAlert", "last_good"),
    ("AuditEvent", "checkpoint"),
    ("SecretFinding", "checkpoint"),
    ("RecoveryItem", "target"),
    ("RecoveryItem", "planned_head"),
    ("RecoveryItem", "previous_head"),
    ("RecoveryItem", "new_head"),
    ("LangGraphCheckpoint", "console"),
]


def _on_delete(action: str):
    def run(apps, schema_editor):
        connection = schema_editor.connection
        if connection.vendor != "postgresql":
            return
        quote = schema_editor.quote_name
        target = apps.get_model("checkpoints", "Checkpoint")._meta.db_table
        for model_name, field_name in REFERENCES:
            model = apps.get_model("checkpoints", model_name)
            table, column = model._meta.db_table, model._meta.get_field(field_name).column
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT con.conname FROM pg_constraint con JOIN pg_attribute a"
                    " ON a.attrelid = con.conrelid AND a.attnum = con.conkey[1]"
                    " WHERE con.contype = 'f' AND con.conrelid = %s::regclass AND con.confrelid = %s::regclass"
                    " AND a.attname = %s",
                    [table, target, column],
                )
                names = [name for (name,) in cursor.fetchall()]
            for name in names:  # NOT VALID, then VALIDATE: no long lock on a large audit table
                schema_editor.execute(
                    f"ALTER TABLE {quote(table)} DROP CONSTRAINT {quote(name)}, ADD CONSTRAINT {quote(name)}"
                    f" FOREIGN KEY ({quote(column)}) REFERENCES {quote(target)} (id)"
                    f" ON DELETE {action} DEFERRABLE INITIALLY DEFERRED NOT VALID"
                )
                schema_editor.execute(f"ALTER TABLE {quote(table)} VALIDATE CONSTRAINT {quote(name)}")

    return run


class Migration(migrations.Migration):
    dependencies = [
        ("checkpoints", "0043_chunk_autovacuum"),
    ]

    operations = [
        migrations.RunPython(_on_delete("RESTRICT"), _on_delete("NO ACTION")),
    ]
