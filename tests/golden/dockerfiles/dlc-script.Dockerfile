# Rendered by dockyard from images/dlc.Dockerfile.j2; the image's tag is a hash of this file and its context.
FROM 763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.7.1-gpu-py312-cu128-ubuntu22.04-sagemaker

USER root
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1
# System packages, and the unprivileged user training runs as.
RUN useradd --create-home --shell /bin/bash dockyard \
 && mkdir -p /opt/ml/code && chown dockyard:dockyard /opt/ml/code

# Pinned Python dependencies.
RUN pip install --no-build-isolation setuptools==80.9.0 boto3==1.44.5 safetensors==0.8.0 huggingface_hub==2.4.0

# The config's own packages (image.python_packages), apart so that changing them keeps the layers above.
RUN pip install --no-build-isolation deepspeed==0.19.8

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
