# Berth's control plane: one image for `berth server` (the default command: API, UI, /healthz,
# /readyz, /metrics) and `berth worker` (the orchestrator worker: `docker run IMAGE berth worker`).
# Build from the repository root:  docker build -f deploy/docker/control-plane.Dockerfile -t berth-control-plane .

FROM python:3.11-slim AS build
WORKDIR /src
RUN python -m venv /opt/berth
COPY requirements.lock pyproject.toml README.md LICENSE ./
COPY sdk ./sdk
COPY workflows ./workflows
COPY activities ./activities
COPY orchestrator ./orchestrator
# The lock is a constraint, not a list: the package's runtime dependencies are installed at the
# locked versions, and the test-only ones in the lock (pytest, playwright, helm) stay out of the image.
RUN /opt/berth/bin/pip install --no-cache-dir --constraint requirements.lock ".[control-plane]"

FROM python:3.11-slim
RUN useradd --system --uid 10001 --home-dir /var/lib/berth --create-home berth
COPY --from=build /opt/berth /opt/berth
ENV PATH=/opt/berth/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    BERTH_DATA_DIR=/var/lib/berth \
    BERTH_HOST=0.0.0.0 \
    BERTH_API_PORT=8080
USER 10001:10001
WORKDIR /var/lib/berth
EXPOSE 8080
# /healthz answers while the process runs; readiness (/readyz: store and Temporal) is for load
# balancers, not for restarting a server whose database is briefly away. The worker has no API port:
# run it with BERTH_WORKER_METRICS_PORT and its own health check on that port's /healthz (docker-compose.yml).
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ['BERTH_API_PORT'], timeout=4)"]
CMD ["berth", "server"]
