# Rendered by dockyard from images/cpu-local.Dockerfile.j2; the image's tag is a hash of this file and its context.
FROM dockyard/base:bookworm-py311

# System packages, and the unprivileged user training runs as.
RUN useradd --create-home --shell /bin/bash dockyard \
 && mkdir -p /opt/ml/code && chown dockyard:dockyard /opt/ml/code

# A virtual environment owned by the image, outside the system Python (PEP 668); pip trusts the system
# store, which holds the authorities the base was given.
ENV VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt
RUN python3 -m venv $VIRTUAL_ENV && pip install setuptools==80.9.0
# Versions of what the pins below pull in (images/constraints.txt).
COPY constraints.txt /etc/dockyard/constraints.txt

# torch: the CPU build from the wheelhouse in the context, in a layer of its own.
COPY wheelhouse/ /tmp/wheelhouse/
RUN pip install --constraint /etc/dockyard/constraints.txt --find-links /tmp/wheelhouse torch==2.13.0+cpu

# Pinned Python dependencies (DeepSpeed builds against the torch above).
RUN pip install --no-build-isolation --constraint /etc/dockyard/constraints.txt deepspeed==0.19.8 boto3==1.44.5 safetensors==0.8.0 huggingface_hub==2.4.0

# What this plan's features need (feature_layers: document readers, transformers, peft, trackers), a layer
# each in a fixed order, so that plans without them share the layers above and plans with some share those.
RUN pip install --no-build-isolation --constraint /etc/dockyard/constraints.txt tensorboard==2.21.0 mlflow-skinny==3.17.2 wandb==0.31.0

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
