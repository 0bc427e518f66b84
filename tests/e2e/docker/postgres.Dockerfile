# PostgreSQL 15 from Debian's packages, for the container test where no registry serves the
# postgres image (tests/e2e/container_images.py). It honours what docker/compose.yaml gives the
# postgres service: POSTGRES_USER, POSTGRES_PASSWORD, POSTGRES_DB and a volume at
# /var/lib/postgresql/data. BASE_IMAGE: a Debian bookworm image whose apt reaches a mirror.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
ENV DEBIAN_FRONTEND=noninteractive
# no cluster of Debian's own (pg_createcluster): the entry point makes the one it serves
RUN mkdir -p /etc/postgresql-common \
    && echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.conf \
    && apt-get update -qq \
    && apt-get install -y -qq --no-install-recommends postgresql-15 >/dev/null \
    && apt-get clean && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /var/lib/postgresql/data /var/run/postgresql \
    && chown postgres:postgres /var/lib/postgresql/data /var/run/postgresql \
    && chmod 0700 /var/lib/postgresql/data
COPY postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint
ENV PATH=/usr/lib/postgresql/15/bin:$PATH PGDATA=/var/lib/postgresql/data
USER postgres
EXPOSE 5432
STOPSIGNAL SIGINT
HEALTHCHECK --interval=2s --timeout=3s --retries=30 CMD ["pg_isready", "-h", "/var/run/postgresql"]
ENTRYPOINT ["postgres-entrypoint"]
