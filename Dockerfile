# lance-flight: the Flight server for Lance datasets (for now the `inspect` CLI).
# Not built in CI here: this machine has no Docker engine (only the client).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY lance_format ./lance_format
COPY flight_server ./flight_server
COPY protos ./protos
RUN pip install --no-cache-dir .
ENTRYPOINT ["lance-flight"]
CMD ["--help"]
