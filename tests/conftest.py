"""Suite-wide settings: Hypothesis without per-example deadlines (the machine is shared)."""

from hypothesis import HealthCheck, settings

settings.register_profile(
    "rtcedge", deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.load_profile("rtcedge")
