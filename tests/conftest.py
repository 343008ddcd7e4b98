"""Suite-wide settings: Hypothesis without per-example deadlines (the machine is shared); a
test skipped for a missing extra fails the run where every extra is installed (CI)."""

from hypothesis import HealthCheck, settings

from tests.support.extras import pytest_sessionfinish  # noqa: F401 - a hook

settings.register_profile(
    "rtcedge", deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.load_profile("rtcedge")
