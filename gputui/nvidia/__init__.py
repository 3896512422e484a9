"""Pure NVIDIA knowledge: nvidia-smi formats, NVML readings, the doctor's rules."""
