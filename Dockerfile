# One image for every process: console, gateway, worker, beat.
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    DJANGO_SETTINGS_MODULE=controlplane.settings \
    CONTROLPLANE_VAR_DIR=/app/var

WORKDIR /app
COPY requirements.txt .
RUN pip install -r requirements.txt

COPY . .
RUN groupadd --system app && useradd --system --gid app --home /app app \
    && mkdir -p /app/var && chown app:app /app/var \
    && SECRET_KEY=build-only-not-used REDIS_URL=redis://unused:6379/0 python manage.py collectstatic --noinput

USER app
EXPOSE 8000
# The console by default; compose overrides the command for the other processes. Threaded workers: gunicorn's
# sync worker is killed when one response outlasts --timeout (30 s), which cut a large CSV export to a slow
# client short; a gthread worker reports itself alive while its threads serve.
CMD ["gunicorn", "controlplane.wsgi", "--bind", "0.0.0.0:8000", "--workers", "3", "--worker-class", "gthread", "--threads", "4"]
