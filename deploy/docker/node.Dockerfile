# A Berth GPU node: `berth node`, which joins the fleet, reads its GPUs through NVML and starts
# model replicas (`vllm serve`) on the GPUs that placement chose.
# Build from the repository root:
#   docker build -f deploy/docker/node.Dockerfile -t berth-node .                           # simulated engine only
#   docker build -f deploy/docker/node.Dockerfile --build-arg WITH_VLLM=true -t berth-node .  # with vLLM
# Run it with the NVIDIA container runtime (`--gpus all`, or the compose file / Helm chart here).

ARG CUDA_IMAGE=nvidia/cuda:12.8.1-runtime-ubuntu22.04
FROM ${CUDA_IMAGE}
ARG WITH_VLLM=false
ARG VLLM_VERSION=0.33.0

ENV DEBIAN_FRONTEND=noninteractive
# Ubuntu 22.04's own python3.11 (universe); every dependency in the lock comes as a wheel.
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3.11 python3.11-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /src
RUN python3.11 -m venv /opt/berth
COPY requirements.lock pyproject.toml README.md LICENSE ./
COPY sdk ./sdk
COPY workflows ./workflows
COPY activities ./activities
COPY orchestrator ./orchestrator
# Runtime dependencies at the locked versions (the lock is a constraint; see control-plane.Dockerfile).
RUN /opt/berth/bin/pip install --no-cache-dir --constraint requirements.lock ".[node]" && rm -rf /src
# vLLM pins its own torch and CUDA libraries, which need not agree with Berth's lock: it gets a
# virtual environment of its own, and only its `vllm` command is put where the node agent runs it.
RUN if [ "$WITH_VLLM" = "true" ]; then \
        python3.11 -m venv /opt/vllm \
        && /opt/vllm/bin/pip install --no-cache-dir "vllm==${VLLM_VERSION}" \
        && ln -s /opt/vllm/bin/vllm /usr/local/bin/vllm; \
    fi

RUN useradd --system --uid 10001 --home-dir /var/lib/berth --create-home berth \
    && mkdir -p /var/cache/berth && chown 10001:10001 /var/cache/berth
ENV PATH=/opt/berth/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    BERTH_DATA_DIR=/var/lib/berth \
    BERTH_HOST=0.0.0.0 \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
# The weights cache and the node's secret (--cache-dir): keep it on the host's disk, so a restarted
# node keeps its weights (a reload from disk, not from origin) and rejoins as itself.
VOLUME ["/var/cache/berth"]
USER 10001:10001
WORKDIR /var/lib/berth
EXPOSE 9400
# The agent's port (--metrics-port 9400 below) serves /metrics, /healthz (the process answers) and /readyz
# (joined, and its heartbeats get through). The image checks liveness only: a control plane that is away for a
# while is no reason to replace the node; docker-compose.yml and the Helm chart read /readyz as well.
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9400/healthz', timeout=4)"]
# The node is named after the container's host name unless the command is replaced; the join
# token, the API's URL and Temporal's address come from BERTH_JOIN_TOKEN, BERTH_API_URL and
# BERTH_TEMPORAL_ADDRESS.
CMD ["sh", "-c", "exec berth node --node-id \"$(hostname)\" --cache-dir /var/cache/berth --metrics-port 9400"]
