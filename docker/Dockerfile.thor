# blockplan on NVIDIA Jetson Thor: JetPack 7 (L4T r38, CUDA 13, Ubuntu 24.04) + TensorRT 10 +
# ROS 2 Jazzy. TensorRT comes with JetPack; engines are built on the target at first start
# and cached in the /engines volume (an engine is only valid for the GPU and TensorRT it was
# built with).
# Build on the Jetson:  docker build -f docker/Dockerfile.thor -t blockplan:thor .
# Run:  docker run --runtime nvidia --net host -v blockplan-engines:/engines blockplan:thor
ARG JETPACK_IMAGE=nvcr.io/nvidia/l4t-jetpack:r38.2.1
FROM ${JETPACK_IMAGE}

ARG ROS_DISTRO=jazzy
ENV DEBIAN_FRONTEND=noninteractive \
    LANG=C.UTF-8 \
    ROS_DISTRO=${ROS_DISTRO}

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl gnupg lsb-release \
    && curl -sSL https://raw.githubusercontent.com/ros/rosdistro/master/ros.key \
        -o /usr/share/keyrings/ros-archive-keyring.gpg \
    && echo "deb [signed-by=/usr/share/keyrings/ros-archive-keyring.gpg] http://packages.ros.org/ros2/ubuntu $(lsb_release -cs) main" \
        > /etc/apt/sources.list.d/ros2.list \
    && apt-get update \
    && apt-get install -y --no-install-recommends \
        ros-${ROS_DISTRO}-ros-base \
        ros-${ROS_DISTRO}-launch-ros \
        ros-${ROS_DISTRO}-diagnostic-msgs \
        ros-${ROS_DISTRO}-visualization-msgs \
        ros-${ROS_DISTRO}-tf2-ros \
        python3-colcon-common-extensions \
        python3-venv python3-pip \
    && rm -rf /var/lib/apt/lists/*

# JetPack's TensorRT and CUDA Python bindings live in the system site packages; the venv
# keeps them (and rclpy) visible. torch for Jetson comes from NVIDIA's Jetson wheel index,
# passed in as a build argument because it is tied to the JetPack release.
ARG TORCH_VERSION=2.9.0
ARG TORCH_WHEEL_INDEX=https://pypi.jetson-ai-lab.io/jp7/cu130
RUN python3 -m venv --system-site-packages /opt/venv
ENV PATH=/opt/venv/bin:${PATH}
RUN pip install --no-cache-dir --index-url "${TORCH_WHEEL_INDEX}" "torch==${TORCH_VERSION}" \
    && pip install --no-cache-dir "onnx==1.18.0"

WORKDIR /ws
COPY . /ws/src/blockplan
RUN pip install --no-cache-dir --no-deps /ws/src/blockplan \
    && pip install --no-cache-dir "safetensors==0.6.2" "rosbags==0.11.9" "tokenizers==0.22.1" "tqdm==4.67.1" "pillow==11.3.0" \
    && . /opt/ros/${ROS_DISTRO}/setup.bash \
    && colcon build --packages-select blockplan --base-paths /ws/src

# The tensorrt backend caches engines under ~/.cache/blockplan/engines: point it at the volume.
RUN mkdir -p /root/.cache/blockplan && ln -s /engines /root/.cache/blockplan/engines
VOLUME ["/engines"]
COPY docker/entrypoint.sh /entrypoint.sh
ENTRYPOINT ["/entrypoint.sh"]
CMD ["ros2", "launch", "blockplan", "planner.launch.py"]
