# lance-flight: the Arrow Flight server for the Lance datasets under /data.
#
#   docker build -t lance-flight .
#   docker run -p 8815:8815 -v "$PWD/datasets:/data" lance-flight
#
# Authentication and TLS: mount the files and append the flags to the command, e.g.
#   docker run ... -e LANCE_FLIGHT_SECRET=... -v "$PWD/conf:/conf:ro" lance-flight \
#     serve /data --host 0.0.0.0 --port 8815 --auth-users /conf/users \
#     --tls-cert /conf/server.crt --tls-key /conf/server.key
# and point the health check at the TLS listener:
#   -e LANCE_FLIGHT_HEALTH_URI=grpc+tls://127.0.0.1:8815 -e LANCE_FLIGHT_HEALTH_ARGS=--insecure-tls
# (with auth on, an UNAUTHENTICATED answer counts as alive; see flight_server/health.py).

# ---- build a wheel (the final image gets neither the sources nor the build tools) ----------
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY lance_format ./lance_format
COPY flight_server ./flight_server
RUN pip wheel --no-deps --wheel-dir /wheels .

# ---- runtime -------------------------------------------------------------------------------
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    LANCE_FLIGHT_HEALTH_URI=grpc://127.0.0.1:8815 \
    LANCE_FLIGHT_HEALTH_ARGS=
COPY --from=build /wheels /wheels
RUN pip install /wheels/*.whl && rm -rf /wheels \
 && groupadd --system --gid 10001 lance \
 && useradd --system --uid 10001 --gid lance --home-dir /data --no-create-home \
      --shell /usr/sbin/nologin lance \
 && mkdir -p /data && chown lance:lance /data

USER lance
WORKDIR /data
VOLUME ["/data"]
EXPOSE 8815

# The server warms its search cache at start, hence the generous start period.
HEALTHCHECK --interval=30s --timeout=10s --start-period=120s --retries=3 \
  CMD python -m flight_server.health $LANCE_FLIGHT_HEALTH_ARGS --timeout 5 || exit 1

ENTRYPOINT ["lance-flight"]
CMD ["serve", "/data", "--host", "0.0.0.0", "--port", "8815"]
