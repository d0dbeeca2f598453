# vmop's two images from one build: `--target runner` (a VM's runner: QEMU, swtpm, OVMF, the VM
# templates) and `--target manager` (the operator; the default target). Both run the compiled
# JavaScript with production dependencies only.
ARG BASE_IMAGE=debian:trixie-slim

FROM ${BASE_IMAGE} AS build
ARG DEBIAN_FRONTEND=noninteractive
# Where the npm registry is reached through a TLS-inspecting proxy: a CA file for Node to trust too.
ARG NODE_EXTRA_CA_CERTS
RUN apt-get update \
 && apt-get install -y --no-install-recommends nodejs npm \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /build
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src src
RUN npm run build && npm prune --omit=dev --no-audit --no-fund

FROM ${BASE_IMAGE} AS node
ARG DEBIAN_FRONTEND=noninteractive
ARG VERSION=0.0.0-dev
LABEL org.opencontainers.image.source="https://github.com/vmop/vmop" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}"
RUN apt-get update \
 && apt-get install -y --no-install-recommends nodejs \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/vmop
ENV NODE_ENV=production
ENTRYPOINT ["node", "/opt/vmop/dist/cli/main.js"]

FROM node AS runner
ARG DEBIAN_FRONTEND=noninteractive
LABEL org.opencontainers.image.title="vmop-runner" \
      org.opencontainers.image.description="Runs one QEMU virtual machine of a vmop VirtualMachine"
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      qemu-system-x86 qemu-system-modules-spice qemu-utils swtpm swtpm-tools ovmf mtools dosfstools genisoimage xz-utils \
 && rm -rf /var/lib/apt/lists/*
COPY templates /opt/vmrunner/templates
COPY --from=build /build/package.json ./
COPY --from=build /build/node_modules node_modules
COPY --from=build /build/dist dist
CMD ["runner"]

FROM node AS manager
LABEL org.opencontainers.image.title="vmop-manager" \
      org.opencontainers.image.description="The vmop operator: reconciles VirtualMachine resources"
# The node agent (same image) routes VMs' own addresses with ip and iptables (nsenter is util-linux's).
RUN apt-get update \
 && apt-get install -y --no-install-recommends iproute2 iptables \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /build/package.json ./
COPY --from=build /build/node_modules node_modules
COPY --from=build /build/dist dist
# The web GUI's pages and scripts (served as they are: no front-end build step).
COPY web web
# Any non-root uid works: the manager writes no files (the chart also mounts its root read-only).
USER 65532:65532
CMD ["manager"]
