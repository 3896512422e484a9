"""The simulated cloud: instance SSH servers, shims (nvidia-smi, ollama, gpu-load, shutdown)."""
