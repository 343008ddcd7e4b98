# rtcedge: one image for both services; the command chooses what runs:
#   docker run ... IMAGE relay serve --listen 0.0.0.0:3478 --internal 10.0.0.5:4000 ...
#   docker run ... IMAGE transceiver serve --id 0 --advertise 203.0.113.5:3478 ...
# Build where a container engine runs (BuildKit: Docker >= 23, Docker 20.10 with DOCKER_BUILDKIT=1,
# buildah/podman). No `# syntax=` line: BuildKit's built-in frontend, nothing fetched but the base.
#   docker build -t rtcedge:0.1.0 --build-arg VERSION=0.1.0 \
#       --build-arg REVISION="$(git rev-parse HEAD)" --build-arg CREATED="$(date -u +%FT%TZ)" .
# Lint: hadolint Dockerfile (tests/deploy/test_dockerfile.py runs it in CI). See docs/deploy.md.

# Pin by digest for reproducible builds, e.g. --build-arg PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:...
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---- builder: the project's wheel plus a wheel of every dependency, in /wheels ----
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
# .dockerignore lets in only what the wheel is built from.
COPY . .
# --only-binary: every dependency (aiortc, av, cryptography, pylibsrtp, aiohttp...) ships
# manylinux wheels for x86_64 and aarch64, so nothing is compiled here and no compiler is needed
# anywhere; a platform without such a wheel fails here, loudly, instead of at run time.
# The grpc extra too (grpcio, protobuf: wheels as well), so that --backend grpc runs as built.
RUN pip wheel --wheel-dir /wheels --only-binary=:all: '.[grpc]' \
    && test -n "$(find /wheels -name 'rtcedge-*.whl')"

# ---- final: the wheels installed into a clean slim Python, run as a non-root user ----
FROM ${PYTHON_IMAGE}

ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="rtcedge" \
      org.opencontainers.image.description="WebRTC ingress for voice AI: relay (one public UDP port) and transceiver (WHIP, aiortc)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.documentation="docs/deploy.md" \
      org.opencontainers.image.base.name="python:3.11-slim-bookworm"

# Inside a container, loopback-only defaults are useless: listen on every interface. The relay's
# --internal (its pod IP) and the transceiver's --id/--advertise have no sensible image default.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    RTCEDGE_LISTEN=0.0.0.0:3478 \
    RTCEDGE_METRICS=0.0.0.0:9478 \
    RTCEDGE_MEDIA=0.0.0.0:5000 \
    RTCEDGE_HTTP=0.0.0.0:8080

# The wheels are bind-mounted from the builder, so they never become a layer of this image.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links=/wheels "$(echo /wheels/rtcedge-*.whl)[grpc]" \
    && groupadd --system --gid 10001 rtcedge \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin rtcedge

# One check for both services: /healthz of the service PID 1 runs (the relay's RTCEDGE_METRICS, the
# transceiver's RTCEDGE_HTTP; both, in that order, for another command), at the variable's address
# (loopback for a wildcard), so that two services on one host network each check their own. Set
# ports through those variables, not flags, for this check to follow them. Kubernetes ignores
# HEALTHCHECK and uses the chart's probes.
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, sys, urllib.request\ntry:\n    argv = open('/proc/1/cmdline', 'rb').read().decode().split('\\0')[:4]\nexcept OSError:\n    argv = []\nown = {'relay': ['RTCEDGE_METRICS'], 'transceiver': ['RTCEDGE_HTTP']}\nnames = [os.path.basename(a) for a in argv if os.path.basename(a) in own]\nfor var in own[names[0]] if names else ['RTCEDGE_HTTP', 'RTCEDGE_METRICS']:\n    host, _, port = os.environ.get(var, '').rpartition(':')\n    host = host.strip('[]')\n    host = {'': '127.0.0.1', '0.0.0.0': '127.0.0.1', '::': '::1'}.get(host, host)\n    if port.isdigit():\n        try:\n            urllib.request.urlopen(f'http://[{host}]:{port}/healthz' if ':' in host else f'http://{host}:{port}/healthz', timeout=3)\n            sys.exit(0)\n        except OSError:\n            pass\nsys.exit(1)"]

# relay: public UDP, metrics/health TCP; transceiver: media UDP, WHIP/health/metrics TCP.
EXPOSE 3478/udp 9478/tcp 5000/udp 8080/tcp

# Numeric, so that Kubernetes' runAsNonRoot can verify it.
USER 10001:10001
CMD ["rtcedge", "--help"]
