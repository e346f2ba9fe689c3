"""blockplan: a ROS 2 onboard planner built on a block-diffusion vision-language-action model."""

__version__ = "0.1.0"
