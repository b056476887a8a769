"""NVML's clock-event reason bits, as the datasets' ``clock_reasons`` column records them.

Defined here, in the shared vocabulary, because both sides read the column: the collectors mark a
row ``throttled`` by them, and ``latpred check`` tells a GPU at its power cap (a GPU at full load)
from one slowed for heat or a hardware limit. Nothing here imports anything: the GPU machine
imports it without pandas' or pydantic's wheels.
"""

# The bits that mean the GPU ran below the clocks it was asked for. (Idle, application clocks,
# sync boost and display clocks are benign and not flagged.)
SW_POWER_CAP = 0x4
HW_SLOWDOWN = 0x8
SW_THERMAL_SLOWDOWN = 0x20
HW_THERMAL_SLOWDOWN = 0x40
HW_POWER_BRAKE_SLOWDOWN = 0x80
THROTTLE_MASK = SW_POWER_CAP | HW_SLOWDOWN | SW_THERMAL_SLOWDOWN | HW_THERMAL_SLOWDOWN | HW_POWER_BRAKE_SLOWDOWN
