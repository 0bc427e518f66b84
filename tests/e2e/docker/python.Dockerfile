# What docker/Dockerfile needs of its PYTHON_IMAGE, from Debian's packages, for the container
# test where no registry serves python:3.11-slim-bookworm (tests/e2e/container_images.py):
# Python 3.11 in a venv first on PATH (`python`, `pip`; Debian's own Python refuses pip
# installs, PEP 668). BASE_IMAGE: a Debian bookworm image whose apt reaches a mirror.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
ENV DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8
RUN apt-get update -qq \
    && apt-get install -y -qq --no-install-recommends python3 python3-venv >/dev/null \
    && apt-get clean && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/python
ENV PATH=/opt/python/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
CMD ["python"]
