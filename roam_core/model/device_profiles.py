"""The published device profiles of the cost model (:mod:`roam_core.model.cost_model`).

Peak figures are the vendors' **dense** numbers: NVIDIA's datasheets print the tensor-core
rates with 2:4 structured sparsity (marked ``*``), twice the dense rate; the dense rate is
used here.  Bandwidth is the datasheet's peak memory bandwidth.

Sources (checked against ``docs/design/cost_model_notes.md``):

* **A100 SXM 80 GB** -- NVIDIA A100 Tensor Core GPU datasheet
  (https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf):
  FP64 9.7, FP64 Tensor 19.5, FP32 19.5, TF32 Tensor 156 (312*), BF16 / FP16 Tensor 312
  (624*) TFLOP/s; 80 GB HBM2e at 2,039 GB/s.
* **H100 SXM** -- NVIDIA H100 Tensor Core GPU datasheet
  (https://www.nvidia.com/en-us/data-center/h100/): FP64 34, FP64 Tensor 67, FP32 67,
  TF32 Tensor 989*, BF16 / FP16 Tensor 1,979* TFLOP/s; 80 GB HBM3 at 3.35 TB/s.
* **H200 SXM** -- NVIDIA H200 Tensor Core GPU datasheet
  (https://www.nvidia.com/en-us/data-center/h200/): the same compute as H100 SXM
  (FP32 67, TF32 989*, BF16 / FP16 1,979* TFLOP/s); 141 GB HBM3e at 4.8 TB/s.

Efficiencies are engineering assumptions, not datasheet figures: large matrix products reach
60-80 % of the tensor peak and elementwise kernels 80-90 % of the bandwidth
(``docs/design/cost_model_notes.md``), so matmul 0.7, convolution 0.6, elementwise and copy
0.85.  Launch overhead: a few microseconds per kernel in eager mode (5 us here).  A machine
at hand gives measured figures instead (``roam calibrate``).
"""

from __future__ import annotations

from types import MappingProxyType

from roam_core.model.cost_model import DeviceProfile

__all__ = ["BUILTIN_PROFILES", "DEFAULT_PROFILE", "GPU_EFFICIENCY", "MEASURED_PROFILES"]

T = 1e12  # TFLOP/s
GB = 1e9  # datasheets' GB (decimal)

#: The assumed fraction of the peak each op class reaches on a GPU (see the module docstring).
GPU_EFFICIENCY = MappingProxyType({"matmul": 0.7, "conv": 0.6, "elementwise": 0.85,
                                   "copy": 0.85, "memory": 0.85})
_LAUNCH_S = 5e-6

A100_80G = DeviceProfile(
    "a100-80g", "NVIDIA A100 SXM 80 GB (datasheet peaks, dense)",
    {"float32": 19.5 * T, "tf32": 156 * T, "bfloat16": 312 * T, "float16": 312 * T,
     "float64": 19.5 * T},
    19.5 * T, 2039 * GB, _LAUNCH_S, GPU_EFFICIENCY, 80 * 10**9, True,
    "NVIDIA A100 Tensor Core GPU datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4-web)")

H100_SXM = DeviceProfile(
    "h100-sxm", "NVIDIA H100 SXM 80 GB (datasheet peaks, dense)",
    {"float32": 67 * T, "tf32": 494.5 * T, "bfloat16": 989.5 * T, "float16": 989.5 * T,
     "float64": 67 * T},
    67 * T, 3350 * GB, _LAUNCH_S, GPU_EFFICIENCY, 80 * 10**9, True,
    "NVIDIA H100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h100)")

H200 = DeviceProfile(
    "h200", "NVIDIA H200 SXM 141 GB (datasheet peaks, dense)",
    {"float32": 67 * T, "tf32": 494.5 * T, "bfloat16": 989.5 * T, "float16": 989.5 * T,
     "float64": 67 * T},
    67 * T, 4800 * GB, _LAUNCH_S, GPU_EFFICIENCY, 141 * 10**9, True,
    "NVIDIA H200 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h200)")

#: The published profiles by name.
BUILTIN_PROFILES: MappingProxyType[str, DeviceProfile] = MappingProxyType(
    {p.name: p for p in (A100_80G, H100_SXM, H200)})
#: Profiles measured on the machine by ``roam calibrate`` (stored as JSON, not built in).
MEASURED_PROFILES = ("cpu", "cuda")
#: The profile every output uses unless told otherwise.
DEFAULT_PROFILE = "h100-sxm"
