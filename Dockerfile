FROM python:3.11-slim
WORKDIR /srv/clarion
COPY pyproject.toml README.md ./
COPY app app
COPY streams streams
COPY projections projections
RUN pip install --no-cache-dir .
COPY clarion.toml ./
ENV CLARION_HOST=0.0.0.0
EXPOSE 8000
CMD ["clarion", "run"]
