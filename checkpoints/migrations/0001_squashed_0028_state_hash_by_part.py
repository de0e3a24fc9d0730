"""Migrations 0001-0028 of release 0.1 in one, for a fresh database: the tables as the models define them, then the
rows every install starts with (role groups, default retention policies, beat schedules) and what the models cannot
say (chunk storage, trigram indexes).

Django runs it only on a database that has none of the migrations it replaces applied; a database at
0028_state_hash_by_part has them all, records this one as applied and runs nothing (a database part of the way
through 0.1 goes on with the old files, which stay until a later release). A later migration may depend on
0028_state_hash_by_part: Django points that dependency here.

What it runs is frozen here (or in a private module of this package), as in the migrations it replaces: see
docs/decisions/0010-frozen-migrations.md. Left out, as a fresh database has no rows for them to change: 0009's
repair of out-of-range times, 0012's memberships for existing users, 0013's and 0014's branch and parent marks,
0021's tally backfill and 0028's rehash.
"""

from __future__ import annotations

import datetime
import uuid
from datetime import timedelta

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import DatabaseError, migrations, models, transaction

import checkpoints.fields

from ._roles import remove_roles, repair_roles


def store_chunks_uncompressed(apps, schema_editor):
    """Chunk data is zstd already: PostgreSQL's own TOAST compression would only burn CPU (0002)."""
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE checkpoints_chunk ALTER COLUMN data SET STORAGE EXTERNAL")


# pg_trgm indexes for substring search (0018, 0022; see _trigram.py), inserted into directly (0024: fastupdate off,
# as every checkpoint updates its session's row). The tables are empty: no need to build them CONCURRENTLY.
TRIGRAM_INDEXES = {
    "session_external_id_trigram": ("checkpoints_agentsession", "external_id"),
    "session_title_trigram": ("checkpoints_agentsession", "title"),
    "session_agent_trigram": ("checkpoints_agentsession", "agent"),
    "checkpoint_name_trigram": ("checkpoints_checkpoint", "name"),
}


def trigram_indexes(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    try:
        with transaction.atomic(using=schema_editor.connection.alias):
            schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    except DatabaseError:
        return  # no privilege: the search works without the indexes
    for name, (table, column) in TRIGRAM_INDEXES.items():
        schema_editor.execute(
            f'CREATE INDEX "{name}" ON "{table}" USING gin ((UPPER("{column}"::text)) gin_trgm_ops)'
            " WITH (fastupdate = off)"
        )


def drop_trigram_indexes(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for name in TRIGRAM_INDEXES:
            schema_editor.execute(f'DROP INDEX IF EXISTS "{name}"')


# Default retention (docs/jobs.md, "Retention"): defaults that reproduce the source systems (0008).
POLICIES = [
    {"kind": "routine", "keep_last": 3, "keep_last_scope": "agent"},
    {"kind": "pre_operation", "until_operation_done": True},
    {"kind": "recovery", "max_age": timedelta(days=7)},
    *[
        {"kind": kind, "keep_last": 100, "keep_last_scope": "session", "keep_first": True, "keep_latest_per_name": True}
        for kind in ("step", "imported", "manual")
    ],
]

# name → (task, every, period), editable in the admin: 0006, 0008 and 0026 in the order they created them
SCHEDULES = {
    "Import from watched folders": ("checkpoints.tasks.scan_watched_sources", 5, "minutes"),
    "Apply retention": ("checkpoints.tasks.apply_retention", 1, "hours"),
    "Take routine checkpoints": ("checkpoints.tasks.take_routine_checkpoints", 30, "minutes"),
    "Detect drift": ("checkpoints.tasks.detect_drift", 5, "minutes"),
    "Collect unreferenced chunks": ("checkpoints.tasks.collect_garbage", 1, "days"),
    "Send due deliveries": ("checkpoints.tasks.send_due_deliveries", 1, "minutes"),
    "Delete old deliveries": ("checkpoints.tasks.delete_old_deliveries", 1, "days"),
}


def install_defaults(apps, schema_editor):
    using = schema_editor.connection.alias
    policy_model = apps.get_model("checkpoints", "RetentionPolicy")
    for policy in POLICIES:
        policy_model.objects.using(using).get_or_create(project=None, kind=policy["kind"], defaults=policy)
    interval_model = apps.get_model("django_celery_beat", "IntervalSchedule")
    task_model = apps.get_model("django_celery_beat", "PeriodicTask")
    for name, (task, every, period) in SCHEDULES.items():
        interval, _ = interval_model.objects.using(using).get_or_create(every=every, period=period)
        task_model.objects.using(using).get_or_create(
            name=name, defaults={"task": task, "interval": interval, "enabled": True}
        )


def uninstall_defaults(apps, schema_editor):
    using = schema_editor.connection.alias
    apps.get_model("django_celery_beat", "PeriodicTask").objects.using(using).filter(name__in=SCHEDULES).delete()
    apps.get_model("checkpoints", "RetentionPolicy").objects.using(using).filter(project=None).delete()


class Migration(migrations.Migration):
    initial = True

    replaces = [
        ("checkpoints", "0001_initial"),
        ("checkpoints", "0002_chunk_storage"),
        ("checkpoints", "0003_permissions"),
        ("checkpoints", "0004_roles"),
        ("checkpoints", "0005_import_sources_and_jobs"),
        ("checkpoints", "0006_watch_schedule"),
        ("checkpoints", "0007_job_runs"),
        ("checkpoints", "0008_default_retention_and_schedules"),
        ("checkpoints", "0009_safe_text_and_time_ranges"),
        ("checkpoints", "0010_token_expiry"),
        ("checkpoints", "0011_jobrun_heartbeat"),
        ("checkpoints", "0012_project_memberships"),
        ("checkpoints", "0013_tree_parents"),
        ("checkpoints", "0014_kaizen_parents"),
        ("checkpoints", "0015_agent_output_attempts"),
        ("checkpoints", "0016_checkpoint_tool_calls"),
        ("checkpoints", "0017_checkpoint_preview"),
        ("checkpoints", "0018_session_name_search"),
        ("checkpoints", "0019_checkpoint_calls_made"),
        ("checkpoints", "0020_drift_scale"),
        ("checkpoints", "0021_session_tallies"),
        ("checkpoints", "0022_checkpoint_name_search"),
        ("checkpoints", "0023_langgraph"),
        ("checkpoints", "0024_writes_help_and_direct_trigram_inserts"),
        ("checkpoints", "0025_events_webhooks_notifications"),
        ("checkpoints", "0026_hooks_delivery_schedules"),
        ("checkpoints", "0027_detector_kinds"),
        ("checkpoints", "0028_state_hash_by_part"),
    ]

    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [
        migrations.CreateModel(
            name='AgentSession',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('external_id', checkpoints.fields.SafeCharField(help_text="The agent's own session id, unique per project.", max_length=200)),
                ('agent', checkpoints.fields.SafeCharField(db_index=True, max_length=200)),
                ('title', checkpoints.fields.SafeCharField(blank=True, max_length=300)),
                ('status', models.CharField(choices=[('active', 'Active'), ('completed', 'Completed'), ('failed', 'Failed'), ('halted', 'Halted'), ('archived', 'Archived')], default='active', max_length=20)),
                ('execution_mode', checkpoints.fields.SafeCharField(blank=True, max_length=50)),
                ('last_seq', models.PositiveIntegerField(default=0, help_text='Highest seq handed out; seqs are never reused.')),
                ('restore_generation', models.PositiveIntegerField(default=0)),
                ('last_seen_at', models.DateTimeField(blank=True, null=True)),
                ('drift_checked_seq', models.PositiveIntegerField(blank=True, help_text='last_seq when drift detection last read its checkpoints: the job skips sessions with none new.', null=True)),
                ('live_root', models.BinaryField(blank=True, help_text='Store address of the latest live state sent.', max_length=32, null=True)),
                ('live_state_at', models.DateTimeField(blank=True, null=True)),
                ('metadata', checkpoints.fields.SafeJSONField(blank=True, default=dict)),
                ('source_path', models.CharField(blank=True, help_text='The folder this session was imported from.', max_length=1000)),
                ('source_format', models.CharField(blank=True, choices=[('dreamos', 'Dreamos'), ('breakpilot', 'Breakpilot'), ('ares', 'Ares'), ('kaizen', 'Kaizen'), ('haytham', 'Haytham'), ('langgraph', 'Langgraph')], max_length=20)),
                ('write_back', models.BooleanField(default=False, help_text='On restore, also write the restored state into source_path in source_format.')),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('updated_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('checkpoint_count', models.IntegerField(db_default=0, default=0)),
                ('raw_bytes', models.BigIntegerField(db_default=0, default=0, help_text="Its checkpoints' state sizes, summed.")),
                ('stored_bytes', models.BigIntegerField(db_default=0, default=0, help_text='What its checkpoints added to the store.')),
                ('failed_count', models.IntegerField(db_default=0, default=0, help_text='Checkpoints that failed or halted.')),
                ('tool_failed_count', models.IntegerField(db_default=0, default=0, help_text='Checkpoints with a failed tool call.')),
            ],
            options={
                'permissions': [('operate_session', 'Can restore, fork and pin checkpoints, and undo restores')],
            },
        ),
        migrations.CreateModel(
            name='ApiToken',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(max_length=200)),
                ('prefix', models.CharField(max_length=16)),
                ('token_hash', models.CharField(max_length=64, unique=True)),
                ('scopes', models.JSONField(default=list)),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('last_used_at', models.DateTimeField(blank=True, null=True)),
                ('revoked_at', models.DateTimeField(blank=True, null=True)),
                ('expires_at', models.DateTimeField(blank=True, help_text='After this the token gets 401; empty: never.', null=True)),
            ],
        ),
        migrations.CreateModel(
            name='Checkpoint',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('seq', models.PositiveIntegerField()),
                ('starts_branch', models.BooleanField(db_default=False, default=False, help_text='Its parent is not the checkpoint that arrived just before it: history forks here.')),
                ('name', checkpoints.fields.SafeCharField(blank=True, max_length=200)),
                ('kind', models.CharField(choices=[('routine', 'Routine'), ('pre_operation', 'Pre Operation'), ('recovery', 'Recovery'), ('step', 'Step'), ('phase', 'Phase'), ('manual', 'Manual'), ('restore', 'Restore'), ('fork', 'Fork'), ('imported', 'Imported')], default='step', max_length=20)),
                ('status', models.CharField(choices=[('in_progress', 'In Progress'), ('completed', 'Completed'), ('failed', 'Failed'), ('halted', 'Halted')], default='completed', max_length=20)),
                ('status_reason', checkpoints.fields.SafeTextField(blank=True)),
                ('step', models.IntegerField(blank=True, null=True)),
                ('phase', models.IntegerField(blank=True, null=True)),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now, help_text="The agent's clock.")),
                ('received_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('root', models.BinaryField(help_text='Store address of the state.', max_length=32)),
                ('state_hash', models.BinaryField(help_text='Digest of the state (store.digests: by top-level value, lists by item).', max_length=32)),
                ('raw_bytes', models.BigIntegerField(default=0, help_text='Size of the state as canonical JSON.')),
                ('stored_bytes', models.BigIntegerField(default=0, help_text='New compressed bytes this checkpoint added.')),
                ('calls_made', models.IntegerField(blank=True, help_text="Tool calls made on the path to it: its parent's and the ones it added, counted when stored (empty: stored before the count existed; manage.py fill_previews counts them).", null=True)),
                ('preview', checkpoints.fields.SafeCharField(blank=True, db_default='', help_text='What happened here in one line (the tool call and its result, or the message it added).', max_length=200)),
                ('tool_failed', models.BooleanField(db_default=False, default=False, help_text='A tool call this checkpoint added failed.')),
                ('pinned', models.BooleanField(default=False)),
                ('operation_id', checkpoints.fields.SafeCharField(blank=True, max_length=200)),
                ('operation_done', models.BooleanField(default=False)),
                ('expires_at', models.DateTimeField(blank=True, null=True)),
                ('idempotency_key', checkpoints.fields.SafeCharField(blank=True, max_length=200)),
                ('metadata', checkpoints.fields.SafeJSONField(blank=True, default=dict)),
                ('parent', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='children', to='checkpoints.checkpoint')),
                ('session', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='checkpoints', to='checkpoints.agentsession')),
            ],
            options={
                'ordering': ['session', 'seq'],
            },
        ),
        migrations.CreateModel(
            name='JobLock',
            fields=[
                ('name', models.CharField(max_length=50, primary_key=True, serialize=False)),
                ('holder', models.CharField(blank=True, max_length=200)),
                ('expires_at', models.DateTimeField(blank=True, null=True)),
            ],
        ),
        migrations.CreateModel(
            name='Project',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('slug', models.SlugField(max_length=100, unique=True)),
                ('name', models.CharField(blank=True, max_length=200)),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
            ],
            options={
                'ordering': ['slug'],
            },
        ),
        migrations.AddField(
            model_name='agentsession',
            name='forked_from',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='forks', to='checkpoints.checkpoint'),
        ),
        migrations.AddField(
            model_name='agentsession',
            name='head',
            field=models.ForeignKey(blank=True, help_text='The checkpoint the agent should resume from.', null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='checkpoints.checkpoint'),
        ),
        migrations.CreateModel(
            name='Chunk',
            fields=[
                ('hash', models.BinaryField(max_length=32, primary_key=True, serialize=False)),
                ('data', models.BinaryField()),
                ('raw_size', models.PositiveIntegerField()),
                ('base', models.BinaryField(blank=True, help_text='For a patch node: the node it applies to.', max_length=32, null=True)),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
            ],
            options={
                'indexes': [models.Index(fields=['created_at'], name='chunk_created')],
            },
        ),
        migrations.CreateModel(
            name='DriftAlert',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('kind', models.CharField(choices=[('cycle_count', 'Cycle Count'), ('long_running', 'Long Running'), ('error_rate', 'Error Rate'), ('repetition', 'Repetition'), ('stalled', 'Stalled'), ('missed_routine', 'Missed Routine'), ('failed', 'Failed'), ('halted', 'Halted'), ('state_growth', 'State Growth'), ('source_missing', 'Source Missing'), ('repeated_action', 'Repeated Action'), ('repeated_error', 'Repeated Error'), ('monologue', 'Monologue'), ('ping_pong', 'Ping Pong'), ('context_overflow', 'Context Overflow'), ('tool_call_loop', 'Tool Call Loop'), ('content_loop', 'Content Loop')], max_length=30)),
                ('severity', models.CharField(choices=[('info', 'Info'), ('warning', 'Warning'), ('critical', 'Critical')], default='warning', max_length=20)),
                ('message', checkpoints.fields.SafeTextField()),
                ('evidence', checkpoints.fields.SafeJSONField(blank=True, default=dict)),
                ('state', models.CharField(choices=[('open', 'Open'), ('acknowledged', 'Acknowledged'), ('resolved', 'Resolved')], default='open', max_length=20)),
                ('opened_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('acknowledged_at', models.DateTimeField(blank=True, null=True)),
                ('resolved_at', models.DateTimeField(blank=True, null=True)),
                ('acknowledged_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                ('checkpoint', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='checkpoints.checkpoint')),
                ('last_good', models.ForeignKey(blank=True, help_text='Newest checkpoint before the drift began: the suggested restore target.', null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='checkpoints.checkpoint')),
                ('session', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='alerts', to='checkpoints.agentsession')),
            ],
            options={
                'permissions': [('triage_alert', 'Can acknowledge and resolve drift alerts')],
            },
        ),
        migrations.CreateModel(
            name='JobRun',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('job', models.CharField(max_length=50)),
                ('status', models.CharField(choices=[('running', 'Running'), ('succeeded', 'Succeeded'), ('failed', 'Failed'), ('skipped', 'Skipped'), ('succeeded_with_errors', 'Succeeded With Errors')], default='running', max_length=30)),
                ('dry_run', models.BooleanField(default=False)),
                ('triggered_by', models.CharField(default='beat', max_length=200)),
                ('worker', models.CharField(blank=True, help_text='host:pid:token of the process running it.', max_length=200)),
                ('started_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('heartbeat_at', models.DateTimeField(blank=True, help_text='Refreshed while the worker is alive.', null=True)),
                ('finished_at', models.DateTimeField(blank=True, null=True)),
                ('result', checkpoints.fields.SafeJSONField(blank=True, default=dict)),
                ('error', checkpoints.fields.SafeTextField(blank=True)),
            ],
            options={
                'ordering': ['-started_at', '-id'],
                'indexes': [models.Index(fields=['job', '-started_at'], name='jobrun_job_started'), models.Index(condition=models.Q(('status', 'running')), fields=['heartbeat_at'], name='jobrun_running_heartbeat')],
            },
        ),
        migrations.CreateModel(
            name='LangGraphWrites',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('checkpoint_ns', checkpoints.fields.SafeTextField(blank=True)),
                ('checkpoint_id', checkpoints.fields.SafeCharField(max_length=200)),
                ('task_id', checkpoints.fields.SafeCharField(max_length=200)),
                ('task_path', checkpoints.fields.SafeTextField(blank=True)),
                ('writes', models.BinaryField(help_text="zstd'd JSON [[idx, channel, value] or [idx, channel, null, positions], …], by idx: a value the next checkpoint holds in its state is kept there once, named by its positions in the channel (null: the channel's whole value).")),
                ('values_root', models.BinaryField(blank=True, help_text='Store address of the state holding the values named.', max_length=32, null=True)),
                ('interrupted', models.BooleanField(default=False, help_text='Holds an __interrupt__ write.')),
                ('resumed', models.BooleanField(default=False, help_text='Holds a __resume__ write.')),
                ('session', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='checkpoints.agentsession')),
            ],
        ),
        migrations.CreateModel(
            name='NotificationRule',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', checkpoints.fields.SafeCharField(max_length=200)),
                ('events', models.JSONField(default=list, help_text='Event types it sends.')),
                ('alert_kinds', models.JSONField(blank=True, default=list, help_text='Alert kinds it sends; empty: every kind.')),
                ('min_severity', models.CharField(choices=[('info', 'Info'), ('warning', 'Warning'), ('critical', 'Critical')], default='warning', max_length=20)),
                ('channel', models.CharField(choices=[('webhook', 'signed webhook'), ('slack', 'Slack-compatible incoming webhook'), ('email', 'email'), ('apprise', 'Apprise URL (Teams, Discord, ntfy, …)')], max_length=20)),
                ('target', models.CharField(help_text='The URL, or email addresses separated by commas.', max_length=2000)),
                ('secret', models.CharField(blank=True, help_text="Signs a webhook channel's deliveries.", max_length=100)),
                ('quiet_minutes', models.PositiveIntegerField(default=30, help_text='One notification per condition this long.')),
                ('enabled', models.BooleanField(default=True)),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('created_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                ('project', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='notification_rules', to='checkpoints.project')),
            ],
            options={
                'permissions': [('manage_notifications', 'Can manage notification rules and webhooks')],
            },
        ),
        migrations.CreateModel(
            name='Phase',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('number', models.PositiveIntegerField()),
                ('name', checkpoints.fields.SafeCharField(max_length=200)),
                ('status', models.CharField(choices=[('pending', 'Pending'), ('in_progress', 'In Progress'), ('completed', 'Completed'), ('failed', 'Failed'), ('skipped', 'Skipped'), ('requires_retry', 'Requires Retry')], default='pending', max_length=20)),
                ('started_at', models.DateTimeField(blank=True, null=True)),
                ('completed_at', models.DateTimeField(blank=True, null=True)),
                ('duration', models.FloatField(blank=True, help_text='Seconds.', null=True)),
                ('retry_count', models.PositiveIntegerField(default=0)),
                ('tokens_in', models.PositiveBigIntegerField(default=0)),
                ('tokens_out', models.PositiveBigIntegerField(default=0)),
                ('cost', models.DecimalField(decimal_places=6, default=0, max_digits=12)),
                ('errors', checkpoints.fields.SafeJSONField(blank=True, default=list)),
                ('metadata', checkpoints.fields.SafeJSONField(blank=True, default=dict)),
                ('session', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='phases', to='checkpoints.agentsession')),
            ],
            options={
                'ordering': ['session', 'number'],
            },
        ),
        migrations.CreateModel(
            name='AgentOutput',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('agent_name', checkpoints.fields.SafeCharField(max_length=200)),
                ('status', checkpoints.fields.SafeCharField(blank=True, max_length=50)),
                ('content', checkpoints.fields.SafeTextField(blank=True, help_text='Markdown.')),
                ('model', checkpoints.fields.SafeCharField(blank=True, max_length=200)),
                ('tokens_in', models.PositiveBigIntegerField(default=0)),
                ('tokens_out', models.PositiveBigIntegerField(default=0)),
                ('tools_used', checkpoints.fields.SafeJSONField(blank=True, default=list)),
                ('duration', models.FloatField(blank=True, help_text='Seconds.', null=True)),
                ('error', checkpoints.fields.SafeTextField(blank=True)),
                ('error_details', checkpoints.fields.SafeJSONField(blank=True, default=dict)),
                ('attempt', models.PositiveIntegerField(default=1, help_text='Which run of this agent in the phase; a re-run adds an output, the latest counts.')),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now, help_text='When the agent produced it (its own clock).')),
                ('phase', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='outputs', to='checkpoints.phase')),
            ],
            options={
                'ordering': ['phase', 'created_at', 'id'],
            },
        ),
        migrations.CreateModel(
            name='PhaseFeedback',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('reviewed', models.BooleanField(default=True)),
                ('approved', models.BooleanField(default=False)),
                ('comments', checkpoints.fields.SafeTextField(blank=True)),
                ('requested_changes', checkpoints.fields.SafeJSONField(blank=True, default=list)),
                ('action', models.CharField(choices=[('approved', 'Approved'), ('retry_with_changes', 'Retry With Changes'), ('skip_phase', 'Skip Phase'), ('rejected', 'Rejected')], max_length=30)),
                ('retry_count', models.PositiveIntegerField(default=0)),
                ('reviewer_name', checkpoints.fields.SafeCharField(blank=True, max_length=200)),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('phase', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='feedback', to='checkpoints.phase')),
                ('reviewer', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'ordering': ['phase', '-created_at', '-id'],
                'permissions': [('approve_phase', 'Can review phases: approve, request changes, skip or reject')],
            },
        ),
        migrations.CreateModel(
            name='LangGraphTombstone',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('external_id', checkpoints.fields.SafeCharField(max_length=200)),
                ('deleted_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('project', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='checkpoints.project')),
            ],
        ),
        migrations.CreateModel(
            name='ImportJob',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('archive', models.CharField(help_text='Where the upload is kept until imported.', max_length=1000)),
                ('original_name', checkpoints.fields.SafeCharField(max_length=300)),
                ('status', models.CharField(choices=[('queued', 'Queued'), ('running', 'Running'), ('done', 'Done'), ('failed', 'Failed')], default='queued', max_length=20)),
                ('imported', models.PositiveIntegerField(default=0)),
                ('skipped', models.PositiveIntegerField(default=0)),
                ('error_count', models.PositiveIntegerField(default=0)),
                ('report', checkpoints.fields.SafeJSONField(blank=True, default=dict)),
                ('error', checkpoints.fields.SafeTextField(blank=True)),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('started_at', models.DateTimeField(blank=True, null=True)),
                ('finished_at', models.DateTimeField(blank=True, null=True)),
                ('created_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, to=settings.AUTH_USER_MODEL)),
                ('project', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='import_jobs', to='checkpoints.project')),
            ],
            options={
                'ordering': ['-created_at', '-id'],
            },
        ),
        migrations.CreateModel(
            name='Event',
            fields=[
                ('id', models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False)),
                ('type', models.CharField(choices=[('checkpoint.created', 'Checkpoint Created'), ('session.restored', 'Session Restored'), ('session.forked', 'Session Forked'), ('alert.opened', 'Alert Opened'), ('alert.escalated', 'Alert Escalated'), ('alert.resolved', 'Alert Resolved'), ('phase.waiting', 'Phase Waiting'), ('phase.feedback', 'Phase Feedback'), ('job.failed', 'Job Failed'), ('import.failed', 'Import Failed'), ('ping', 'Ping')], max_length=40)),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('data', checkpoints.fields.SafeJSONField(blank=True, default=dict)),
                ('dedupe_key', models.CharField(blank=True, help_text="The same condition's events share it (a rule's quiet period).", max_length=200)),
                ('project', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='checkpoints.project')),
            ],
        ),
        migrations.CreateModel(
            name='AuditEvent',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('actor', checkpoints.fields.SafeCharField(help_text='Who, as shown: a username, token:<name> or system.', max_length=200)),
                ('action', models.CharField(max_length=50)),
                ('target', checkpoints.fields.SafeCharField(blank=True, max_length=300)),
                ('reason', checkpoints.fields.SafeTextField(blank=True)),
                ('details', checkpoints.fields.SafeJSONField(blank=True, default=dict)),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('actor_token', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='checkpoints.apitoken')),
                ('actor_user', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                ('session', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='checkpoints.agentsession')),
                ('checkpoint', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='checkpoints.checkpoint')),
                ('project', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='checkpoints.project')),
            ],
            options={
                'ordering': ['-created_at', '-id'],
            },
        ),
        migrations.AddField(
            model_name='apitoken',
            name='project',
            field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='tokens', to='checkpoints.project'),
        ),
        migrations.AddField(
            model_name='agentsession',
            name='project',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='sessions', to='checkpoints.project'),
        ),
        migrations.CreateModel(
            name='ProjectMembership',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('role', models.CharField(choices=[('viewer', 'viewer: browses'), ('operator', 'operator: also restores, forks, pins, undoes, triages alerts and imports'), ('approver', 'approver: also reviews phases')], max_length=20)),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('project', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='memberships', to='checkpoints.project')),
                ('user', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='project_memberships', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'ordering': ['project', 'user', 'role'],
            },
        ),
        migrations.CreateModel(
            name='RetentionPolicy',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('kind', models.CharField(choices=[('routine', 'Routine'), ('pre_operation', 'Pre Operation'), ('recovery', 'Recovery'), ('step', 'Step'), ('phase', 'Phase'), ('manual', 'Manual'), ('restore', 'Restore'), ('fork', 'Fork'), ('imported', 'Imported')], max_length=20)),
                ('keep_last', models.PositiveIntegerField(blank=True, null=True)),
                ('keep_last_scope', models.CharField(choices=[('agent', 'Agent'), ('session', 'Session')], default='session', max_length=10)),
                ('max_age', models.DurationField(blank=True, null=True)),
                ('keep_first', models.BooleanField(default=False)),
                ('keep_latest_per_name', models.BooleanField(default=False)),
                ('until_operation_done', models.BooleanField(default=False)),
                ('applies_to_langgraph', models.BooleanField(default=False, help_text="Also apply to LangGraph threads; without it they are kept whole until the agent prunes them (LangGraph's get_state_history reads every checkpoint).")),
                ('enabled', models.BooleanField(default=True)),
                ('project', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, to='checkpoints.project')),
            ],
            options={
                'verbose_name_plural': 'retention policies',
            },
        ),
        migrations.CreateModel(
            name='SessionCount',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('field', models.CharField(choices=[('name', 'Name'), ('kind', 'Kind'), ('status', 'Status')], max_length=10)),
                ('value', checkpoints.fields.SafeCharField(max_length=200)),
                ('count', models.IntegerField()),
                ('session', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='checkpoints.agentsession')),
            ],
        ),
        migrations.CreateModel(
            name='SessionRollup',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('block', models.IntegerField(help_text='(seq - 1) // ROLLUP_BLOCK')),
                ('hour', models.DateTimeField()),
                ('count', models.IntegerField()),
                ('steps', models.IntegerField(help_text='Checkpoints of kind step.')),
                ('trouble', models.IntegerField(help_text='Checkpoints in trouble: failed, halted or with a failed tool call.')),
                ('raw_max', models.BigIntegerField(help_text='The largest state.')),
                ('stored_bytes', models.BigIntegerField()),
                ('first_seq', models.IntegerField()),
                ('last_seq', models.IntegerField()),
                ('session', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='checkpoints.agentsession')),
            ],
        ),
        migrations.CreateModel(
            name='WatchedSource',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('path', models.CharField(max_length=1000)),
                ('format', models.CharField(choices=[('dreamos', 'Dreamos'), ('breakpilot', 'Breakpilot'), ('ares', 'Ares'), ('kaizen', 'Kaizen'), ('haytham', 'Haytham'), ('langgraph', 'Langgraph')], max_length=20)),
                ('enabled', models.BooleanField(default=True)),
                ('seen', models.JSONField(blank=True, default=dict, help_text='File path → (size, mtime) already imported.')),
                ('last_scan_at', models.DateTimeField(blank=True, null=True)),
                ('last_error', checkpoints.fields.SafeTextField(blank=True)),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('project', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='watched_sources', to='checkpoints.project')),
            ],
        ),
        migrations.CreateModel(
            name='WebhookEndpoint',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('url', models.URLField(max_length=2000)),
                ('events', models.JSONField(default=list, help_text='Event types it receives.')),
                ('secret', models.CharField(help_text='Signs every delivery (HMAC-SHA256); shown once.', max_length=100)),
                ('description', checkpoints.fields.SafeCharField(blank=True, max_length=200)),
                ('created_by', checkpoints.fields.SafeCharField(blank=True, help_text='Who, as shown: a username or token:<name>.', max_length=200)),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('secret_rotated_at', models.DateTimeField(blank=True, null=True)),
                ('deleted_at', models.DateTimeField(blank=True, help_text='Deleted endpoints keep their deliveries.', null=True)),
                ('project', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='webhooks', to='checkpoints.project')),
            ],
        ),
        migrations.CreateModel(
            name='Delivery',
            fields=[
                ('id', models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False)),
                ('channel', models.CharField(choices=[('webhook', 'signed webhook'), ('slack', 'Slack-compatible incoming webhook'), ('email', 'email'), ('apprise', 'Apprise URL (Teams, Discord, ntfy, …)')], max_length=20)),
                ('target', models.CharField(help_text='Where it went, copied when it was made.', max_length=2000)),
                ('status', models.CharField(choices=[('pending', 'Pending'), ('succeeded', 'Succeeded'), ('failed', 'Failed'), ('suppressed', 'Suppressed')], default='pending', max_length=20)),
                ('attempts', models.PositiveIntegerField(default=0)),
                ('next_attempt_at', models.DateTimeField(blank=True, null=True)),
                ('last_attempt_at', models.DateTimeField(blank=True, null=True)),
                ('response_code', models.PositiveIntegerField(blank=True, null=True)),
                ('last_error', checkpoints.fields.SafeTextField(blank=True)),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('event', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='deliveries', to='checkpoints.event')),
                ('rule', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='deliveries', to='checkpoints.notificationrule')),
                ('endpoint', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='deliveries', to='checkpoints.webhookendpoint')),
            ],
            options={
                'verbose_name_plural': 'deliveries',
            },
        ),
        migrations.CreateModel(
            name='LangGraphCheckpoint',
            fields=[
                ('console', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, primary_key=True, related_name='langgraph', serialize=False, to='checkpoints.checkpoint')),
                ('checkpoint_ns', checkpoints.fields.SafeTextField(blank=True)),
                ('checkpoint_id', checkpoints.fields.SafeCharField(max_length=200)),
                ('parent_checkpoint_id', checkpoints.fields.SafeCharField(blank=True, max_length=200)),
                ('current', models.BooleanField(default=True)),
                ('header', models.BinaryField(help_text="zstd'd JSON of LangGraph's checkpoint without id and channel values.")),
                ('metadata', checkpoints.fields.SafeJSONField(blank=True, default=dict, help_text="LangGraph's metadata as put (typed JSON).")),
                ('run_id', checkpoints.fields.SafeCharField(blank=True, max_length=200)),
                ('session', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='checkpoints.agentsession')),
            ],
        ),
        migrations.AddIndex(
            model_name='checkpoint',
            index=models.Index(fields=['session', 'created_at'], name='checkpoint_session_time'),
        ),
        migrations.AddIndex(
            model_name='checkpoint',
            index=models.Index(fields=['session', 'name', 'seq'], name='checkpoint_session_name'),
        ),
        migrations.AddIndex(
            model_name='checkpoint',
            index=models.Index(fields=['session', 'kind', 'seq'], name='checkpoint_session_kind'),
        ),
        migrations.AddIndex(
            model_name='checkpoint',
            index=models.Index(condition=models.Q(('operation_id', ''), _negated=True), fields=['operation_id'], name='checkpoint_operation'),
        ),
        migrations.AddIndex(
            model_name='checkpoint',
            index=models.Index(condition=models.Q(('starts_branch', True)), fields=['session', 'seq'], name='checkpoint_branch_start'),
        ),
        migrations.AddIndex(
            model_name='checkpoint',
            index=models.Index(condition=models.Q(('status__in', ['failed', 'halted']), ('tool_failed', True), _connector='OR'), fields=['session', 'seq'], name='checkpoint_trouble'),
        ),
        migrations.AddConstraint(
            model_name='checkpoint',
            constraint=models.UniqueConstraint(fields=('session', 'seq'), name='checkpoint_seq_per_session'),
        ),
        migrations.AddConstraint(
            model_name='checkpoint',
            constraint=models.UniqueConstraint(condition=models.Q(('idempotency_key', ''), _negated=True), fields=('session', 'idempotency_key'), name='checkpoint_idempotency_per_session'),
        ),
        migrations.AddConstraint(
            model_name='checkpoint',
            constraint=models.CheckConstraint(condition=models.Q(('created_at__gte', datetime.datetime(1970, 1, 1, 0, 0, tzinfo=datetime.timezone.utc)), ('created_at__lt', datetime.datetime(9000, 1, 1, 0, 0, tzinfo=datetime.timezone.utc))), name='checkpoint_created_at_in_range'),
        ),
        migrations.AddIndex(
            model_name='driftalert',
            index=models.Index(fields=['state', '-opened_at'], name='alert_state_opened'),
        ),
        migrations.AddIndex(
            model_name='driftalert',
            index=models.Index(fields=['-opened_at', '-id'], name='alert_opened'),
        ),
        migrations.AddIndex(
            model_name='driftalert',
            index=models.Index(models.OrderBy(models.Case(models.When(severity='critical', then=models.Value(2)), models.When(severity='warning', then=models.Value(1)), default=models.Value(0), output_field=models.SmallIntegerField()), descending=True), models.OrderBy(models.F('opened_at'), descending=True), models.OrderBy(models.F('id'), descending=True), condition=models.Q(('state', 'resolved'), _negated=True), name='alert_unresolved_list'),
        ),
        migrations.AddIndex(
            model_name='driftalert',
            index=models.Index(fields=['session', 'state'], name='alert_session_state'),
        ),
        migrations.AddConstraint(
            model_name='driftalert',
            constraint=models.UniqueConstraint(condition=models.Q(('state', 'resolved'), _negated=True), fields=('session', 'kind'), name='one_unresolved_alert_per_session_kind'),
        ),
        migrations.AddConstraint(
            model_name='langgraphwrites',
            constraint=models.UniqueConstraint(fields=('session', 'checkpoint_ns', 'checkpoint_id', 'task_id'), name='langgraph_writes_per_task'),
        ),
        migrations.AddConstraint(
            model_name='phase',
            constraint=models.UniqueConstraint(fields=('session', 'number'), name='phase_number_per_session'),
        ),
        migrations.AddConstraint(
            model_name='phase',
            constraint=models.CheckConstraint(condition=models.Q(models.Q(('started_at__isnull', True), models.Q(('started_at__gte', datetime.datetime(1970, 1, 1, 0, 0, tzinfo=datetime.timezone.utc)), ('started_at__lt', datetime.datetime(9000, 1, 1, 0, 0, tzinfo=datetime.timezone.utc))), _connector='OR'), models.Q(('completed_at__isnull', True), models.Q(('completed_at__gte', datetime.datetime(1970, 1, 1, 0, 0, tzinfo=datetime.timezone.utc)), ('completed_at__lt', datetime.datetime(9000, 1, 1, 0, 0, tzinfo=datetime.timezone.utc))), _connector='OR')), name='phase_times_in_range'),
        ),
        migrations.AddIndex(
            model_name='phasefeedback',
            index=models.Index(fields=['phase', '-created_at'], name='feedback_latest'),
        ),
        migrations.AddConstraint(
            model_name='langgraphtombstone',
            constraint=models.UniqueConstraint(fields=('project', 'external_id'), name='langgraph_tombstone_per_thread'),
        ),
        migrations.AddIndex(
            model_name='event',
            index=models.Index(fields=['created_at'], name='event_created'),
        ),
        migrations.AddIndex(
            model_name='auditevent',
            index=models.Index(fields=['-created_at'], name='audit_created'),
        ),
        migrations.AddIndex(
            model_name='auditevent',
            index=models.Index(fields=['session', '-created_at'], name='audit_session'),
        ),
        migrations.AddIndex(
            model_name='auditevent',
            index=models.Index(fields=['action', '-created_at'], name='audit_action'),
        ),
        migrations.AddIndex(
            model_name='agentsession',
            index=models.Index(fields=['project', 'status', '-updated_at'], name='session_project_status'),
        ),
        migrations.AddIndex(
            model_name='agentsession',
            index=models.Index(fields=['-updated_at'], name='session_updated'),
        ),
        migrations.AddConstraint(
            model_name='agentsession',
            constraint=models.UniqueConstraint(fields=('project', 'external_id'), name='session_external_id_per_project'),
        ),
        migrations.AddConstraint(
            model_name='projectmembership',
            constraint=models.UniqueConstraint(fields=('project', 'user', 'role'), name='membership_role_per_project_user'),
        ),
        migrations.AddConstraint(
            model_name='projectmembership',
            constraint=models.CheckConstraint(condition=models.Q(('role__in', ['viewer', 'operator', 'approver'])), name='membership_role_known'),
        ),
        migrations.AddConstraint(
            model_name='retentionpolicy',
            constraint=models.UniqueConstraint(fields=('project', 'kind'), name='retention_policy_per_project_kind'),
        ),
        migrations.AddConstraint(
            model_name='retentionpolicy',
            constraint=models.UniqueConstraint(condition=models.Q(('project__isnull', True)), fields=('kind',), name='retention_policy_global_kind'),
        ),
        migrations.AddConstraint(
            model_name='sessioncount',
            constraint=models.UniqueConstraint(fields=('session', 'field', 'value'), name='count_per_session_field_value'),
        ),
        migrations.AddIndex(
            model_name='sessionrollup',
            index=models.Index(fields=['hour'], name='rollup_hour'),
        ),
        migrations.AddConstraint(
            model_name='sessionrollup',
            constraint=models.UniqueConstraint(fields=('session', 'block', 'hour'), name='rollup_per_session_block_hour'),
        ),
        migrations.AddConstraint(
            model_name='watchedsource',
            constraint=models.UniqueConstraint(fields=('project', 'path'), name='watched_source_path_per_project'),
        ),
        migrations.AddIndex(
            model_name='delivery',
            index=models.Index(condition=models.Q(('status', 'pending')), fields=['next_attempt_at'], name='delivery_due'),
        ),
        migrations.AddIndex(
            model_name='delivery',
            index=models.Index(fields=['endpoint', '-created_at'], name='delivery_endpoint'),
        ),
        migrations.AddIndex(
            model_name='delivery',
            index=models.Index(fields=['rule', '-created_at'], name='delivery_rule'),
        ),
        migrations.AddIndex(
            model_name='delivery',
            index=models.Index(fields=['created_at'], name='delivery_created'),
        ),
        migrations.AddIndex(
            model_name='langgraphcheckpoint',
            index=models.Index(condition=models.Q(('run_id', ''), _negated=True), fields=['run_id'], name='langgraph_checkpoint_run'),
        ),
        migrations.AddConstraint(
            model_name='langgraphcheckpoint',
            constraint=models.UniqueConstraint(condition=models.Q(('current', True)), fields=('session', 'checkpoint_ns', 'checkpoint_id'), name='langgraph_checkpoint_current_id'),
        ),
        # Checkpoint.tool_calls left the model in 0019 but not the database (processes of the release before still
        # wrote it): the column is there on every 0.1 database, so the migration that drops it finds it here too.
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.AddField(
                    model_name="checkpoint",
                    name="tool_calls",
                    field=models.IntegerField(
                        blank=True,
                        help_text="Tool calls its state records, counted when stored (empty: stored before the count existed).",
                        null=True,
                    ),
                ),
            ],
        ),
        migrations.RunPython(store_chunks_uncompressed, migrations.RunPython.noop),
        migrations.RunPython(trigram_indexes, drop_trigram_indexes),
        migrations.RunPython(repair_roles, remove_roles),
        migrations.RunPython(install_defaults, uninstall_defaults),
    ]
