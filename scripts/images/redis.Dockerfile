# A stand-in for the official Redis image (docker.io/library/redis), made from Debian's package
# where no registry is reachable. The chart runs `redis-server <config>` as uid 999, as it does
# with the official image.
ARG BASE_IMAGE=debian:trixie-slim
FROM ${BASE_IMAGE}
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends redis-server \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir /data && chown 999:999 /data
WORKDIR /data
USER 999:999
EXPOSE 6379
CMD ["redis-server"]
