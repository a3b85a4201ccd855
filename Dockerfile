# Basin's app on port 8501, the store on a volume:
#   docker build -t basin .
#   docker run -p 8501:8501 -v basin-store:/data basin
# A CUDA image: build on a CUDA runtime base and take torch's CUDA wheel, e.g.
#   docker build -t basin-cuda --build-arg BASE=nvidia/cuda:12.6.3-runtime-ubuntu24.04 \
#       --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu126 .
#   docker run --gpus all -p 8501:8501 -v basin-store:/data basin-cuda
# (a CUDA base needs python3.11+ and pip: the Ubuntu 24.04 base has python3 3.12).
ARG BASE=python:3.11-slim
FROM ${BASE}

# The CPU wheel by default: PyPI's torch pulls several GB of CUDA libraries.
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_BREAK_SYSTEM_PACKAGES=1 \
    PYTHONUNBUFFERED=1 BASIN_HOME=/data
WORKDIR /app

# A C++ compiler: torch.compile builds Basin's compiled chunks of steps with it (--compile auto,
# always, never). Without one, everything steps eagerly, with one warning
# (samplers.compiled.compile_problem).
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends g++ \
    && rm -rf /var/lib/apt/lists/*

COPY requirements.txt .
RUN python3 -m pip install "torch==2.13.0" --index-url "${TORCH_INDEX}" \
    && python3 -m pip install -r requirements.txt

COPY . .
VOLUME /data
EXPOSE 8501
# Inside a container the server must listen on all interfaces for -p to reach it; outside one,
# .streamlit/config.toml keeps it on 127.0.0.1. A browser must still name the server by one of
# server.allowedHosts (config.toml: localhost, 127.0.0.1, ::1; against DNS rebinding), so the
# host's http://localhost:8501 works. Serving a class: list the names students type, e.g.
#   docker run -p 8501:8501 -e STREAMLIT_SERVER_ALLOWED_HOSTS="class.example.edu localhost" ...
# Everyone who reaches the app sees, cancels and deletes every run in /data (docs/teaching.md).
CMD ["python3", "-m", "streamlit", "run", "app.py", "--server.address=0.0.0.0", "--server.port=8501"]
