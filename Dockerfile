# The base is an argument so the image also builds on a local Debian bookworm image with
# python3 and python3-venv from apt (make container-check does); the default is the official one.
ARG BASE=python:3.11-slim

# Build stage: Clarion and its dependencies into a virtual environment under /opt/clarion,
# made with whichever python3 the base has.
FROM ${BASE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY app app
COPY streams streams
COPY projections projections
RUN python3 -m venv /opt/clarion \
    && /opt/clarion/bin/pip install --no-cache-dir --disable-pip-version-check .

# Runtime: the same base with only the environment and the type catalog, run as a user
# without privileges.
FROM ${BASE}
COPY --from=build /opt/clarion /opt/clarion
WORKDIR /srv/clarion
COPY clarion.toml ./
RUN useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin clarion
USER clarion
ENV PATH=/opt/clarion/bin:$PATH \
    CLARION_HOST=0.0.0.0
EXPOSE 8000
CMD ["clarion", "run"]
