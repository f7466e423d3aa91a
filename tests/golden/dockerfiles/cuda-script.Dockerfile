# Rendered by dockyard from images/cuda.Dockerfile.j2; the image's tag is a hash of this file and its context.
FROM nvidia/cuda:12.8.1-cudnn-devel-ubuntu24.04

# System packages, and the unprivileged user training runs as.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends numactl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --create-home --shell /bin/bash dockyard \
 && mkdir -p /opt/ml/code && chown dockyard:dockyard /opt/ml/code

# cuda-compat lets a newer CUDA run on an older driver, but on multi-node jobs it makes NCCL hang.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 python3-venv python3-dev \
    build-essential autoconf automake libtool git curl ca-certificates libhwloc-dev pkg-config \
 && apt-get purge -y $(dpkg-query -W -f '${Package}\n' 'cuda-compat-*' 2>/dev/null) \
 && rm -rf /var/lib/apt/lists/*

# EFA: libfabric with the EFA provider and Open MPI; the kernel module and limits belong to the host.
RUN curl -fsSL https://efa-installer.amazonaws.com/aws-efa-installer-1.43.1.tar.gz | tar -xz -C /tmp \
 && cd /tmp/aws-efa-installer && ./efa_installer.sh -y --skip-kmod --skip-limit-conf --no-verify \
 && rm -rf /tmp/aws-efa-installer /var/lib/apt/lists/*

# NCCL, pinned to a build for CUDA 12.8.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends --allow-downgrades \
    --allow-change-held-packages libnccl2=2.27.7-1+cuda12.8 libnccl-dev=2.27.7-1+cuda12.8 \
 && apt-mark hold libnccl2 libnccl-dev \
 && rm -rf /var/lib/apt/lists/*

# GDRCopy's user-space library (its kernel module belongs to the host).
RUN git clone --depth 1 --branch v2.5.1 https://github.com/NVIDIA/gdrcopy /tmp/gdrcopy \
 && make -C /tmp/gdrcopy prefix=/opt/gdrcopy CUDA=/usr/local/cuda lib lib_install \
 && rm -rf /tmp/gdrcopy

# aws-ofi-nccl: the NCCL network plugin that carries NCCL's traffic over EFA.
RUN curl -fsSL https://github.com/aws/aws-ofi-nccl/releases/download/v1.16.3/aws-ofi-nccl-1.16.3.tar.gz \
    | tar -xz -C /tmp \
 && cd /tmp/aws-ofi-nccl-1.16.3 \
 && ./configure --prefix=/opt/aws-ofi-nccl --with-libfabric=/opt/amazon/efa --with-cuda=/usr/local/cuda \
    --with-mpi=/opt/amazon/openmpi --enable-platform-aws --disable-tests \
 && make -j"$(nproc)" && make install \
 && rm -rf /tmp/aws-ofi-nccl-1.16.3
ENV PATH=/opt/amazon/openmpi/bin:/opt/amazon/efa/bin:$PATH \
    LD_LIBRARY_PATH=/opt/aws-ofi-nccl/lib:/opt/amazon/openmpi/lib:/opt/amazon/efa/lib:/opt/gdrcopy/lib:$LD_LIBRARY_PATH

# A virtual environment owned by the image, outside the system Python (PEP 668); pip trusts the system
# store, which holds the authorities the base was given.
ENV VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt
RUN python3 -m venv $VIRTUAL_ENV && pip install setuptools==80.9.0
# Versions of what the pins below pull in (images/constraints.txt).
COPY constraints.txt /etc/dockyard/constraints.txt

# torch: the build for CUDA 12.8 from PyTorch's own index, in a layer of its own.
RUN pip install --constraint /etc/dockyard/constraints.txt --index-url https://download.pytorch.org/whl/cu128 torch==2.13.0

# Pinned Python dependencies (DeepSpeed builds against the torch above).
RUN pip install --no-build-isolation --constraint /etc/dockyard/constraints.txt deepspeed==0.19.8 boto3==1.44.5 safetensors==0.8.0 huggingface_hub==2.4.0

# dockyard's runtime: the entrypoint and the plan's types, nothing of the compiler's host side, so a
# change there (the CLI, the planner, the docs) leaves this layer and the image's tag as they are. Its
# bytecode is compiled here, as pip compiles the packages': training runs as a user who cannot write beside
# root's files, so each of its processes would otherwise compile these modules again as it starts.
COPY dockyard/ /opt/dockyard/
ENV PYTHONPATH=/opt/dockyard
RUN printf '#!/bin/sh\nexec python -m entrypoint "$@"\n' > /usr/local/bin/dockyard-entrypoint \
    && chmod 755 /usr/local/bin/dockyard-entrypoint \
    && python -m compileall -q --invalidation-mode checked-hash /opt/dockyard

# The container starts as root, as SageMaker (and its SDK's local mode) mounts /opt/ml from root-owned
# folders: the entrypoint prepares those paths and starts training as dockyard (setpriv).
WORKDIR /opt/ml/code
# SageMaker starts the container with the argument `train`; the entrypoint accepts it.
ENTRYPOINT ["dockyard-entrypoint"]

# The user's code, last: a change to it rebuilds only this layer.
COPY --chown=dockyard:dockyard code/ /opt/ml/code/
