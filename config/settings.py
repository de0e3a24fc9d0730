"""Checkpoint Console settings: one file, driven by environment variables (docs/configuration.md lists them)."""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.management.utils import get_random_secret_key
from kombu import Queue

from checkpoints import task_names
from checkpoints.registry import detectors as drift_detectors

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("VAR_DIR", BASE_DIR / "var"))
VAR_DIR.mkdir(parents=True, exist_ok=True)


def env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return int(value) if value else default


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def _local_secret_key() -> str:
    """A random key kept under var/, so a local install never runs on a guessable key."""
    path = VAR_DIR / "secret_key"
    if not path.exists():
        path.write_text(get_random_secret_key())
        path.chmod(0o600)
    return path.read_text().strip()


TESTING = "pytest" in sys.modules
DEBUG = env_bool("DEBUG", False)
SECRET_KEY = os.environ.get("SECRET_KEY") or _local_secret_key()
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", "")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django.contrib.postgres",  # index expressions with an operator class (trigram search); inert on SQLite
    "django_htmx",
    "template_partials",
    "django_celery_beat",
    "ninja",
    "axes",
    "checkpoints",
    "dashboard",
]

MIDDLEWARE = [
    "django_prometheus.middleware.PrometheusBeforeMiddleware",  # first and last: times the whole request
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # A token without the scope its API operation needs gets 403 before the body's size is even looked at.
    "checkpoints.api.common.require_scope",
    # Before anything reads the body: the CSRF check reads (and spools) forms and uploads.
    "config.security.RequestBodyLimitMiddleware",
    "checkpoints.api.common.read_api_body",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "axes.middleware.AxesMiddleware",
    "django_prometheus.middleware.PrometheusAfterMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

_TEMPLATE_FILES = ["django.template.loaders.filesystem.Loader", "django.template.loaders.app_directories.Loader"]
# Parsed templates are kept (what Django does when no loaders are named; naming the partials loader had left the
# cache out, and every page read and parsed its templates again: ~a third of a console page's server time).
# DEBUG reads them afresh, so an edited template shows on the next request.
_TEMPLATE_LOADERS = _TEMPLATE_FILES if DEBUG else [("django.template.loaders.cached.Loader", _TEMPLATE_FILES)]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": False,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
            "loaders": [("template_partials.loader.Loader", _TEMPLATE_LOADERS)],
            "builtins": ["template_partials.templatetags.partials"],
        },
    }
]

DATABASE_URL = os.environ.get("DATABASE_URL") or f"sqlite:///{VAR_DIR / 'db.sqlite3'}"
DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=env_int("CONN_MAX_AGE", 60))}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Web, worker and beat share the file: WAL lets readers run beside the one writer. Connections are kept as on
    # a server database (serve's gunicorn threads reuse theirs): opening one costs ~6 ms and closing the last one
    # checkpoints the WAL, which a request paid for twice when connections lasted one request.
    DATABASES["default"]["OPTIONS"] = {
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
    }
    # django-prometheus' SQLite backend, with the process's writers queued on a lock rather than on SQLite's
    # busy handler's sleeps, and its cursor class built once (config/sqlite3/base.py).
    DATABASES["default"]["ENGINE"] = "config.sqlite3"
else:
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
    DATABASES["default"]["TEST"] = {"NAME": os.environ.get("TEST_DATABASE_NAME") or None}
# django-prometheus' wrappers of the same backends count queries, their time and errors for /metrics.
DATABASES["default"]["ENGINE"] = DATABASES["default"]["ENGINE"].replace(
    "django.db.backends.", "django_prometheus.db.backends.", 1
)

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# Permissions come from project memberships (staff: their groups, in every project); see checkpoints/access.py.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",  # first: refuses a locked-out login before any password check
    "checkpoints.access.ProjectRoleBackend",
]
if TESTING:  # a real hash costs 0.5 s here, and the suite creates users by the hundred
    PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboard:overview"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = os.environ.get("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(os.environ.get("STATIC_ROOT", BASE_DIR / "staticfiles"))
STATICFILES_DIRS = [BASE_DIR / "static"]
# Hashed names need `collectstatic`; the dev server and tests read files straight from static/.
_serve_from_finders = DEBUG or TESTING
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if _serve_from_finders
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}
WHITENOISE_USE_FINDERS = _serve_from_finders
WHITENOISE_AUTOREFRESH = _serve_from_finders

# HTTPS hardening: on in production (compose.yaml sets HTTPS=1), off for a local http://127.0.0.1 run.
HTTPS = env_bool("HTTPS", False)
SECURE_SSL_REDIRECT = HTTPS
SESSION_COOKIE_SECURE = HTTPS
CSRF_COOKIE_SECURE = HTTPS
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000 if HTTPS else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = HTTPS
SECURE_HSTS_PRELOAD = HTTPS
# Behind a reverse proxy: trust its X-Forwarded-Proto, and take the client's address from X-Forwarded-For,
# PROXY_COUNT entries from the right (the ones our own proxies appended; anything left of them is the client's say).
BEHIND_PROXY = env_bool("BEHIND_PROXY", False)
PROXY_COUNT = env_int("PROXY_COUNT", 1)
if BEHIND_PROXY:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_CONTENT_TYPE_NOSNIFF = True
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_AGE = env_int("SESSION_COOKIE_AGE", 12 * 60 * 60)
SESSION_EXPIRE_AT_BROWSER_CLOSE = env_bool("SESSION_EXPIRE_AT_BROWSER_CLOSE", False)
X_FRAME_OPTIONS = "DENY"
# Probes and scrapers inside the deployment's network speak plain HTTP to web:8000 (compose.yaml's healthchecks).
SECURE_REDIRECT_EXEMPT = [r"^health/", r"^metrics$"]

# Content-Security-Policy: scripts and styles only from our own static files, no inline code of either kind.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],  # the API docs' icons are data: URIs
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}

# Request bodies, refused with 413 before they are read (config.security.RequestBodyLimitMiddleware): the API
# takes up to CHECKPOINT_MAX_BODY_BYTES, the console's import upload IMPORT_UPLOAD_MAX_BYTES from a signed-in
# user, everything else DATA_UPLOAD_MAX_MEMORY_SIZE. Uploaded files past FILE_UPLOAD_MAX_MEMORY_SIZE go to a
# temporary file rather than memory.
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("DATA_UPLOAD_MAX_MEMORY_SIZE", 2_621_440)
DATA_UPLOAD_MAX_NUMBER_FIELDS = env_int("DATA_UPLOAD_MAX_NUMBER_FIELDS", 1000)
FILE_UPLOAD_MAX_MEMORY_SIZE = env_int("FILE_UPLOAD_MAX_MEMORY_SIZE", 2_621_440)

# Login throttling (django-axes): LOGIN_FAILURE_LIMIT failed sign-ins for one username, or from one address,
# lock that username or address for LOGIN_COOLOFF_MINUTES. Counters live in the database, shared by every process.
AXES_HANDLER = "axes.handlers.database.AxesDatabaseHandler"
AXES_FAILURE_LIMIT = env_int("LOGIN_FAILURE_LIMIT", 10)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("LOGIN_COOLOFF_MINUTES", 15))
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_HTTP_RESPONSE_CODE = 429  # axes' default, named here: config.security's lockout page answers with it
# Attempts during a lockout neither count nor extend it: the lock ends when the page says it does.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_CLIENT_IP_CALLABLE = "config.security.client_ip"
AXES_LOCKOUT_CALLABLE = "config.security.login_locked_out"

# Every request logged (the dev server's lines; the image's gunicorn logs them anyway and sets it); off, each web
# process logs one line a minute of its request counts instead (config/access.py).
ACCESS_LOG = env_bool("ACCESS_LOG", False)
if not ACCESS_LOG:
    MIDDLEWARE.insert(1, "config.access.RequestCounts")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {
        "django.request": {"level": "ERROR"},
        # The dev server's line per request (`make run`): only with ACCESS_LOG; its 5xx lines stay.
        "django.server": {"level": "INFO" if ACCESS_LOG else "ERROR"},
        "axes": {"level": "WARNING"},  # not its "BEGIN version" line from every process at start
    },
}

# The shared cache (API rate limits): CACHE_URL, else the Redis broker, else files under var/ (one host).
CACHE_URL = os.environ.get("CACHE_URL") or (
    os.environ.get("CELERY_BROKER_URL", "") if os.environ.get("CELERY_BROKER_URL", "").startswith("redis") else ""
)
# Short socket timeouts: nothing that writes waits on the cache (events.wanted_types reads the database when it
# fails), so a Redis that stops answering costs a request at most a second, not the kernel's TCP timeout.
REDIS_CACHE_OPTIONS: dict[str, object] = {"socket_connect_timeout": 1, "socket_timeout": 1}
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": CACHE_URL,
        "OPTIONS": REDIS_CACHE_OPTIONS,
    }
    if CACHE_URL
    else {"BACKEND": "django.core.cache.backends.filebased.FileBasedCache", "LOCATION": str(VAR_DIR / "cache")}
}
# Requests per API token, e.g. "600/min" (s, min, hour, day); empty: no limit.
API_RATE_LIMIT = os.environ.get("API_RATE_LIMIT", "")

# Checkpoint store limits (bad input beyond these gets a 4xx and writes nothing).
CHECKPOINT_MAX_DEPTH = env_int("CHECKPOINT_MAX_DEPTH", 200)
CHECKPOINT_MAX_BODY_BYTES = env_int("CHECKPOINT_MAX_BODY_BYTES", 16 * 1024 * 1024)
CHECKPOINT_KEYFRAME_INTERVAL = env_int("CHECKPOINT_KEYFRAME_INTERVAL", 48)
CHECKPOINT_CACHE_STATES = env_int("CHECKPOINT_CACHE_STATES", 64)  # 32 agents in flight, two states each
# earlier patches a new patch is compressed against (at most store.PATCH_CONTEXT, 16); releases before migration 0042
# read patches of at most 4, so a rolling upgrade sets 4 until every process runs this one
CHECKPOINT_PATCH_CONTEXT = env_int("CHECKPOINT_PATCH_CONTEXT", 16)
# a keyframe compresses the patches before it again with its new leaves (store._rebase); releases before migration
# 0043 cannot read such a patch, so a rolling upgrade sets it off until every process runs this one
CHECKPOINT_REBASE = env_bool("CHECKPOINT_REBASE", True)

# Secrets found at ingest (docs/secrets.md): on by default; the fingerprints' key (empty: derived from SECRET_KEY);
# how much of one checkpoint's change is scanned, in text and in time, before the scan stops and says so.
SECRETS_SCAN = env_bool("SECRETS_SCAN", True)
SECRETS_FINGERPRINT_KEY = os.environ.get("SECRETS_FINGERPRINT_KEY", "")
SECRETS_SCAN_MAX_BYTES = env_int("SECRETS_SCAN_MAX_BYTES", 4 * 1024 * 1024)
SECRETS_SCAN_MAX_MS = env_int("SECRETS_SCAN_MAX_MS", 200)
SECRETS_PATTERNS_TTL_SECONDS = env_int("SECRETS_PATTERNS_TTL_SECONDS", 30)

# Drift detection (docs/drift.md) and routine checkpoints: the thresholds each detector declares, with their defaults
# (DRIFT_WINDOW, DRIFT_CYCLE_LIMIT, …, ROUTINE_INTERVAL_MINUTES: checkpoints/registry/detectors.py; the meaning of
# each is on docs/configuration.md), each from the environment variable of the same name.
globals().update({name: env_int(name, default) for name, default in drift_detectors.defaults().items()})
IMPORT_UPLOAD_MAX_BYTES = env_int("IMPORT_UPLOAD_MAX_BYTES", 512 * 1024 * 1024)
# Uploaded archives (checkpoints/sources/archives.py), checked from their index before anything is unpacked.
IMPORT_ARCHIVE_MAX_BYTES = env_int("IMPORT_ARCHIVE_MAX_BYTES", 2 * 1024**3)  # unpacked, all members together
IMPORT_ARCHIVE_MAX_RATIO = env_int("IMPORT_ARCHIVE_MAX_RATIO", 100)  # unpacked ÷ packed: archive, and zip member
IMPORT_ARCHIVE_MAX_MEMBERS = env_int("IMPORT_ARCHIVE_MAX_MEMBERS", 100_000)  # files and folders
IMPORT_ARCHIVE_MAX_DEPTH = env_int("IMPORT_ARCHIVE_MAX_DEPTH", 32)  # folders above one member
IMPORT_ARCHIVE_MAX_NAME_LENGTH = env_int("IMPORT_ARCHIVE_MAX_NAME_LENGTH", 1024)  # characters in one member's path
# LangGraph checkpointer imports (checkpoints/sources/formats/langgraph.py): a SqliteSaver file may keep SQLite busy
# this long in all, a PostgresSaver database's statements this long each, before the import of it is stopped.
IMPORT_SQLITE_SECONDS = env_int("IMPORT_SQLITE_SECONDS", 300)
IMPORT_POSTGRES_STATEMENT_SECONDS = env_int("IMPORT_POSTGRES_STATEMENT_SECONDS", 300)
# Storage GC never deletes chunks younger than this (ingest writes chunks before the checkpoint row).
GC_GRACE_MINUTES = env_int("GC_GRACE_MINUTES", 60)
# Retention deletes at most this many checkpoints per transaction, and sleeps this long between two, so that agents
# writing meanwhile are slowed no more than by any process using as much CPU (docs/jobs.md, "Retention").
RETENTION_BATCH_ROWS = env_int("RETENTION_BATCH_ROWS", 500)
RETENTION_BATCH_PAUSE_MS = env_int("RETENTION_BATCH_PAUSE_MS", 50)
# A running job refreshes its heartbeat (and its lock) this often; a run silent for longer than the
# staleness threshold has lost its worker: it is marked failed and its lock is free.
JOB_HEARTBEAT_SECONDS = env_int("JOB_HEARTBEAT_SECONDS", 30)
JOB_STALE_AFTER_SECONDS = env_int("JOB_STALE_AFTER_SECONDS", 120)
RECOVERY_MAX_SESSIONS = env_int("RECOVERY_MAX_SESSIONS", 5000)  # sessions one fleet recovery may take

# Celery: Redis in production and CI; `make run` uses kombu's filesystem transport (no server).
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "filesystem://")
if CELERY_BROKER_URL.startswith("filesystem://"):
    # Private to the user who runs the console: whoever can write here can queue any task with any arguments
    # (config/broker.py writes each message file 0600 as well).
    _broker_dir = VAR_DIR / "broker"
    for _folder in (_broker_dir, *(_broker_dir / _sub for _sub in ("queue", "processed", "control"))):
        _folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        _folder.chmod(0o700)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "queue"),
        "data_folder_out": str(_broker_dir / "queue"),
        "processed_folder": str(_broker_dir / "processed"),
        "control_folder": str(_broker_dir / "control"),
        "store_processed": False,
        "polling_interval": 0.1,
    }
# A Redis broker that accepts connections and never answers must not hold a write: a send after commit gives
# up within about these seconds per try (the delivery stays pending for the sweep); a worker's blocking reads
# (BRPOP, 1 s) are shorter.
REDIS_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {"socket_connect_timeout": 2, "socket_timeout": 3}
if CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
    CELERY_BROKER_TRANSPORT_OPTIONS = REDIS_BROKER_TRANSPORT_OPTIONS
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.5}
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TIMEZONE = TIME_ZONE
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_BEAT_SYNC_EVERY = 1  # record each run as it is sent (beat's last tick, which /health/ reads, stays current)
CELERY_RESULT_EXPIRES = None  # no result backend: nothing to expire, so beat adds no "celery.backend_cleanup" job
# Webhook and notification sends wait on receivers: their own queue, so a slow receiver never holds up the jobs.
CELERY_TASK_ROUTES = task_names.routes()  # send_delivery and send_due_deliveries: the "deliveries" queue
# A worker started without -Q (`celery -A config worker`, as Celery's docs say) consumes every queue a task is
# routed to, not only "celery": otherwise deliveries would wait forever. -Q still narrows it.
CELERY_TASK_DEFAULT_QUEUE = "celery"
CELERY_TASK_QUEUES = [
    Queue(name) for name in sorted({CELERY_TASK_DEFAULT_QUEUE, *(r["queue"] for r in CELERY_TASK_ROUTES.values())})
]

# Notifications and event webhooks: links in them point here; receivers on private addresses only when allowed.
CONSOLE_BASE_URL = os.environ.get("CONSOLE_BASE_URL", "http://127.0.0.1:8000").rstrip("/")
WEBHOOK_ALLOW_PRIVATE = env_bool("WEBHOOK_ALLOW_PRIVATE", False)
WEBHOOK_TIMEOUT_SECONDS = env_int("WEBHOOK_TIMEOUT_SECONDS", 10)
WEBHOOK_MAX_ATTEMPTS = env_int("WEBHOOK_MAX_ATTEMPTS", 6)
DELIVERY_KEEP_DAYS = env_int("DELIVERY_KEEP_DAYS", 30)
EMAIL_BACKEND = os.environ.get("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
EMAIL_HOST = os.environ.get("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25)
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "checkpoint-console@localhost")

# /metrics (Prometheus): a scrape must send "Authorization: Bearer <METRICS_TOKEN>"; unset, /metrics is open only
# with DEBUG on (401 otherwise). The same token shows /health/'s details.
METRICS_TOKEN = os.environ.get("METRICS_TOKEN", "")
# A Celery worker serves its own counts (its ingests: imports, routine checkpoints) on this port; 0: it does not.
WORKER_METRICS_PORT = env_int("WORKER_METRICS_PORT", 0)
if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):  # prometheus-client writes each process's counts there
    Path(os.environ["PROMETHEUS_MULTIPROC_DIR"]).mkdir(parents=True, exist_ok=True)
# /health/ (readiness): how long a worker may take to answer a ping, how old beat's newest run of a periodic
# task may be (the shortest schedule is 1 minute, and beat records each run as it sends it), the free space under
# VAR_DIR.
HEALTH_WORKER_TIMEOUT_SECONDS = float(os.environ.get("HEALTH_WORKER_TIMEOUT_SECONDS", "1.0"))
HEALTH_BEAT_MAX_AGE_MINUTES = env_int("HEALTH_BEAT_MAX_AGE_MINUTES", 15)
HEALTH_DISK_MIN_FREE_MB = env_int("HEALTH_DISK_MIN_FREE_MB", 500)
