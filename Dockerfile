# Checkpoint Console: one image for web (gunicorn), worker and beat (celery); compose.yaml runs all three.

# ---- builder: the dependencies declared in pyproject.toml, in a venv the final stage copies --------
FROM python:3.11-slim AS builder

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/venv/bin:$PATH
RUN python -m venv /opt/venv

WORKDIR /src
COPY pyproject.toml ./
COPY clients/python ./clients/python
# Only pyproject.toml is copied, so a code change does not reinstall the dependencies. The project's
# own packages are not installed as a wheel: settings find templates/ and static/ beside config/,
# so the code runs from the source tree in /app (PYTHONPATH below).
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > requirements.txt \
    && pip install ./clients/python -r requirements.txt \
    && pip check

# ---- final: runtime only, non-root ---------------------------------------------------------------
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/venv/bin:$PATH \
    PYTHONPATH=/app \
    VAR_DIR=/app/var \
    ACCESS_LOG=1 \
    WEB_CONCURRENCY=3

RUN groupadd --system --gid 10001 app \
    && useradd --system --uid 10001 --gid app --home-dir /app --no-create-home --shell /usr/sbin/nologin app

COPY --from=builder /opt/venv /opt/venv

WORKDIR /app
COPY manage.py gunicorn.conf.py ./
COPY config ./config
COPY checkpoints ./checkpoints
COPY dashboard ./dashboard
COPY templates ./templates
COPY static ./static

# Hashed, compressed static files for whitenoise (DEBUG is off by default). The key is set for this
# step only; at run time SECRET_KEY must come from the environment. The code and static files stay
# owned by root: the app user can write only to var/.
RUN SECRET_KEY=collectstatic-only-never-used-at-run-time python manage.py collectstatic --no-input \
    && rm -rf var && mkdir var && chown app:app var

USER app
EXPOSE 8000

# WEB_CONCURRENCY sets gunicorn's worker count.
CMD ["gunicorn", "config.wsgi", "--bind", "0.0.0.0:8000", "--worker-tmp-dir", "/dev/shm", "--access-logfile", "-"]
