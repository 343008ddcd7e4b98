"""The umbrella command ``rtcedge`` (keygen, up, bench): the top layer, over bench/, testbed/,
relay/, transceiver/ and common/; nothing imports it (pyproject.toml [tool.importlinter])."""
